"""The ``fedload`` command line."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from app.participant.command import HostFactory, agent_command
from app.publish import publish_command
from app.settings import get_settings
from app.tail import tail
from spark_jobs.whatif.command import whatif

console = Console()
cli = typer.Typer(
    help="fedload: a federated load-management marketplace for stream processing. "
    "A mistake is reported in one line (exit status 2); add --debug to any command for the "
    "traceback.",
    no_args_is_help=True,
    add_completion=False,
)
db_cli = typer.Typer(help="Manage the registry database.", no_args_is_help=True)
contracts_cli = typer.Typer(help="Contracts as code: apply federation files.", no_args_is_help=True)
participants_cli = typer.Typer(help="Register participants.", no_args_is_help=True)
audit_cli = typer.Typer(help="The audit log: append-only, hash-chained.", no_args_is_help=True)
cli.add_typer(db_cli, name="db")
cli.add_typer(contracts_cli, name="contracts")
cli.add_typer(participants_cli, name="participants")
cli.add_typer(audit_cli, name="audit")
cli.command("whatif")(whatif)
cli.command("tail")(tail)
cli.command("publish")(publish_command)


def _spark_host() -> HostFactory:
    from spark_jobs.runtime.participant_host import make_host

    return make_host


cli.command("agent")(agent_command(_spark_host))


@db_cli.command("upgrade")
def db_upgrade(
    revision: str = typer.Argument("head", help="Alembic revision to migrate to."),
) -> None:
    """Migrate the registry (DATABASE_URL, default a SQLite file under var/) to REVISION."""
    from app.db.migrate import upgrade

    url = get_settings().database_url
    upgrade(url, revision)
    console.print(f"[green]migrated[/] {_redact(url)} to {revision}")


@contracts_cli.command("apply")
def contracts_apply(
    file: Path = typer.Argument(..., help="Federation YAML file (see contracts/README.md)."),
    migrate: bool = typer.Option(True, help="Run migrations first."),
    print_key: str | None = typer.Option(
        None,
        "--print-key",
        metavar="PARTICIPANT",
        help="Print only this new participant's API key on stdout (the rest goes to stderr), "
        "for a script: A_KEY=$(fedload contracts apply FILE --print-key A).",
    ),
) -> None:
    """Validate FILE and upsert its participants, contracts and tasks. Idempotent.

    Applying the same file twice changes nothing. On an error the message names the file, the
    line and the field, and nothing is written.
    """
    from app.db.migrate import upgrade
    from app.db.session import unit_of_work
    from app.federation.apply import apply_federation
    from app.federation.document import load_federation

    # Applied on the operator's host, which sees the files sources' directories; a
    # FederationFileError is one line, exit 2 (app/cli_errors.py).
    doc = load_federation(file, check_paths=True)
    if print_key is not None and print_key not in {p.name for p in doc.participants}:
        raise typer.BadParameter(
            f"{file} has no participant {print_key!r}", param_hint="--print-key"
        )
    url = get_settings().database_url
    if migrate:
        upgrade(url)
    with unit_of_work(url) as session:
        result = apply_federation(session, doc, actor=f"file:{file}")
    if print_key is None:
        _print_apply_result(result.changes, result.new_keys)
        return
    _print_apply_result(result.changes, {}, to=Console(stderr=True))
    if print_key not in result.new_keys:
        from app.user_errors import UserError

        raise UserError(
            f"--print-key: participant {print_key} existed before this apply",
            "its key was shown when it was created; rotate it through the admin API for a new one",
        )
    print(result.new_keys[print_key])


def _print_apply_result(
    changes: list[str], new_keys: dict[str, str], to: Console | None = None
) -> None:
    out = to or console
    if not changes:
        out.print("no changes: the registry already matches the file")
    shown = 12
    for change in changes[:shown]:
        out.print(f"  {change}")
    if len(changes) > shown:
        out.print(f"  ... and {len(changes) - shown} more changes ({len(changes)} in all)")
    if new_keys:
        table = Table("participant", "API key (shown once)")
        for name, key in new_keys.items():
            table.add_row(name, key)
        out.print(table)


@participants_cli.command("create")
def participants_create(
    name: str = typer.Argument(..., help="Unique participant name."),
    capacity: float = typer.Option(..., help="Capacity in load units (1 unit = 1% of a CPU)."),
) -> None:
    """Register a participant and print its API key (shown only this once)."""
    from app.db.migrate import upgrade
    from app.db.session import unit_of_work
    from app.participants.schemas import ParticipantCreate
    from app.participants.service import create_participant

    request = ParticipantCreate(name=name, capacity=capacity)  # bad values: before any write
    url = get_settings().database_url
    upgrade(url)
    with unit_of_work(url) as session:
        created = create_participant(session, request, actor="cli")
    console.print(f"participant {created.participant.name} (id {created.participant.id})")
    console.print(f"API key (shown once): {created.api_key}")


@audit_cli.command("verify")
def audit_verify() -> None:
    """Recompute the audit log's hash chains (DATABASE_URL) from their first entries to their last.

    The log is several chains side by side, so that concurrent writers need not wait for one
    another. Exits 0 and prints the entry count, one head hash over every chain's end and each
    chain's last entry when every entry is intact (keep them somewhere else to detect a rewrite
    of the whole log later); exits 1 naming the first entry that breaks a chain (changed,
    removed, inserted or reordered).
    """
    from app.audit.verify import verify
    from app.db.session import unit_of_work

    url = get_settings().database_url
    with unit_of_work(url) as session:
        verdict = verify(session)
    if verdict.broken is None:
        console.print(
            f"[green]audit chain intact[/]: {verdict.entries} entries, head {verdict.head}"
        )
        for chain, (last_id, last_hash) in sorted(verdict.ends.items()):
            console.print(f"  chain {chain}: entry #{last_id} {last_hash}")
        return
    where = f"entry #{verdict.broken.entry_id}" if verdict.broken.entry_id else "end of the log"
    console.print(
        f"[red]audit chain broken at {where}[/]: {verdict.broken.problem} "
        f"({verdict.entries} entries read)",
        soft_wrap=True,
    )
    raise typer.Exit(1)


@cli.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="TCP port."),
    federation: Path | None = typer.Option(None, help="Apply this federation file on start."),
    workers: int = typer.Option(
        1,
        min=1,
        help="Uvicorn worker processes, each with its own connection pool "
        "(FEDLOAD_MAX_CONCURRENT_REQUESTS + FEDLOAD_DB_POOL_SPARE connections, and on "
        "PostgreSQL FEDLOAD_MAX_CONCURRENT_REQUESTS more for reads).",
    ),
    access_log: bool | None = typer.Option(
        None,
        "--access-log/--no-access-log",
        help="One log line per request (default FEDLOAD_ACCESS_LOG, off).",
    ),
) -> None:
    """Run the REST API and the admin UI (migrates the registry first).

    Fails at once, in one line, when the port is taken or the database does not answer
    within FEDLOAD_DB_CONNECT_TIMEOUT_SECONDS.
    """
    from app.cli_errors import ensure_free_port
    from app.parent_watch import wanted as stop_with_launcher
    from app.parent_watch import watch_parent

    ensure_free_port(host, port, "--port")  # before loading the service and migrating
    import uvicorn

    from app.db.migrate import upgrade
    from app.db.session import check_database

    settings = get_settings()
    try:
        check_database(settings.database_url, settings.database_options())
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        typer.secho(
            f"error: the database {_redact(settings.database_url)} does not answer ({reason}); "
            "check DATABASE_URL and that the server is up",
            fg="red",
            err=True,
        )
        raise typer.Exit(2) from None
    if settings.log_format is None:
        # A server logs JSON lines unless FEDLOAD_LOG_FORMAT=text; through the environment, so
        # worker processes (which read their settings anew) log the same way.
        os.environ["FEDLOAD_LOG_FORMAT"] = "json"
        get_settings.cache_clear()
        settings = get_settings()
    upgrade(settings.database_url)
    if federation is not None:
        contracts_apply(federation, migrate=False)
    console.print(
        f"fedload on http://{host}:{port}  (API docs /docs, admin UI /admin, {workers} worker(s))"
    )
    if stop_with_launcher():
        # Started by a scenario driver: stop as on SIGTERM (uvicorn's clean shutdown) once the
        # driver is gone, however it went (app.parent_watch).
        watch_parent(os.getppid(), lambda: os.kill(os.getpid(), signal.SIGTERM), threading.Event())
    # An import string and a factory: every worker process builds its own app, engine and pool.
    # log_config=None: uvicorn's loggers go through the JSON/text handler create_app sets up;
    # the request middleware (app/observability) already writes one line per request, so
    # uvicorn's own access log stays off unless asked for.
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        log_config=None,
        access_log=settings.access_log if access_log is None else access_log,
    )


@cli.command("demo")
def demo(
    federation: Path = typer.Option(
        Path("contracts/demo.yaml"), "--federation", help="Federation file to run."
    ),
    duration: float | None = typer.Option(
        None, "--duration", help="Seconds to run (default: the file's own duration, scaled)."
    ),
    overtime: float = typer.Option(
        120.0,
        "--overtime",
        min=0.0,
        help="Seconds the run may go on past the timeline while the allocation is not yet "
        "acceptable (the market still trading).",
    ),
    report: Path = typer.Option(Path("var/reports/demo"), "--report", help="Report directory."),
    no_ui: bool = typer.Option(False, "--no-ui", help="No live terminal view."),
    time_scale: float = typer.Option(
        0.55, help="Multiply every time in the federation (0.55: about four minutes)."
    ),
    host: str = typer.Option("127.0.0.1", help="With --serve-only: interface for the service."),
    port: int = typer.Option(8000, help="With --serve-only: TCP port (admin UI at /admin)."),
    serve_only: bool = typer.Option(
        False, "--serve-only", help="Only start the service with the federation applied."
    ),
    scenario: str | None = typer.Option(
        None,
        "--scenario",
        help="Run a high-availability scenario instead: partition, tentative, crash or "
        "downstream, through the product (fedload serve and fedload agent processes with their "
        "own Spark; partition, tentative and downstream cut real TCP links with a "
        "fault-injecting proxy, crash SIGKILLs a host and fails over by gap, rollback and "
        "precise recovery); writes DIR/report.json and exits non-zero when a check fails.",
    ),
    quick: bool = typer.Option(
        False, "--quick", help="With --engine python: short timings (X = 2 s, 3.5 s failure)."
    ),
    engine: str = typer.Option(
        "agents",
        "--engine",
        help="With --scenario: agents (the product: serve and agent processes) or python (a "
        "plain-Python model of DPC, node processes without Spark or the registry's agents; "
        "a model, not the product).",
    ),
) -> None:
    """Run the Borealis load-management demo live: service, agent processes, Spark, report.

    `fedload serve` and one `fedload agent` process per participant (A, B, C, and D when it
    joins) trade load under their contracts while the timeline plays; the federation file's real
    fragments run on each host's own Spark and move between the processes with their state. A
    live view shows loads, thresholds, marginal costs and moves; the admin UI is up meanwhile.
    It ends with DIR/report.json, PNG plots and checks (the moved fragments' output equals a run
    without moves; at least two stateful moves between processes; the allocation is acceptable
    at the end) and exits non-zero when a check fails.
    """
    if scenario is not None:
        _run_scenario(scenario, report, quick, engine)
        return
    _require_demo_federation(federation)
    if serve_only:
        console.print(f"admin UI: http://{host}:{port}/admin (key: FEDLOAD_ADMIN_KEY)")
        console.print(f"REST API: http://{host}:{port}/v1, OpenAPI at http://{host}:{port}/docs")
        serve(host=host, port=port, federation=federation, workers=1, access_log=None)
        return
    from spark_jobs.scenarios.demo import DemoOptions, run_demo

    result = run_demo(
        DemoOptions(
            federation=federation,
            report_dir=report,
            duration=duration,
            overtime=overtime,
            time_scale=time_scale,
            ui=not no_ui,
        ),
        console,
    )
    if not all(result["checks"].values()):
        raise typer.Exit(1)


def _run_scenario(name: str, report: Path, quick: bool, engine: str = "agents") -> None:
    through_agents = {
        "crash": _run_crash,
        "partition": _run_partition,
        "tentative": _run_tentative,
        "downstream": _run_downstream,
    }
    if name not in through_agents:
        console.print(
            f"[red]--scenario: unknown {name!r}; choose one of {', '.join(through_agents)}"
        )
        raise typer.Exit(2)
    if engine == "agents":
        through_agents[name](report)
        return
    if engine != "python":
        console.print(f"[red]--engine: unknown {engine!r}; choose agents or python")
        raise typer.Exit(2)
    from spark_jobs.ha.scenarios import SCENARIOS, Timings, run

    if name not in SCENARIOS:
        console.print(f"[red]--engine python: no model of {name!r}; it runs with --engine agents")
        raise typer.Exit(2)
    directory = report / name if report == Path("var/reports/demo") else report
    console.print(f"scenario {name} on the python model: starting nodes (reports in {directory})")
    # A scenario runs for a minute or more with nothing to print until its checks: show it lives.
    with console.status(f"scenario {name} on the python model: failure, recovery, checks..."):
        result = run(name, directory, Timings.quick() if quick else Timings())
    for check, passed in result["checks"].items():
        console.print(f"{'[green]pass[/]' if passed else '[red]FAIL[/]'} {check}")
    console.print(f"report: {directory / 'report.json'}")
    if not result["ok"]:
        raise typer.Exit(1)


def _run_crash(report: Path) -> None:
    """The crash scenario through the product: ``fedload serve`` and ``fedload agent``
    processes, a SIGKILL of the agent hosting the fragments, a failover per recovery type."""
    from spark_jobs.scenarios.crash import CrashOptions, run_crash

    directory = report / "crash" if report == Path("var/reports/demo") else report
    console.print(f"scenario crash: fedload serve and agent processes (reports in {directory})")
    result = run_crash(CrashOptions(report_dir=directory), console)
    if not result["ok"]:
        raise typer.Exit(1)


def _run_partition(report: Path) -> None:
    """The partition scenario through the product: ``fedload serve`` and ``fedload agent``
    processes, an active replica on a second agent, the consumer's link to the primary cut."""
    from spark_jobs.scenarios.partition import PartitionOptions, run_partition

    directory = report / "partition" if report == Path("var/reports/demo") else report
    console.print(f"scenario partition: fedload serve and agent processes (reports in {directory})")
    result = run_partition(PartitionOptions(report_dir=directory), console)
    if not result["ok"]:
        raise typer.Exit(1)


def _run_tentative(report: Path) -> None:
    """The tentative scenario through the product: ``fedload serve`` and ``fedload agent``
    processes, every link into the primary's agent cut, its active replica on a second agent
    tentative within X and corrected after the heal."""
    from spark_jobs.scenarios.tentative import TentativeOptions, run_tentative

    directory = report / "tentative" if report == Path("var/reports/demo") else report
    console.print(f"scenario tentative: fedload serve and agent processes (reports in {directory})")
    result = run_tentative(TentativeOptions(report_dir=directory), console)
    if not result["ok"]:
        raise typer.Exit(1)


def _run_downstream(report: Path) -> None:
    """The downstream scenario through the product: ``fedload serve`` and ``fedload agent``
    processes, a fragment downstream of a replicated one reading the active copy while the
    link from the primary's host to the owner's log is cut."""
    from spark_jobs.scenarios.downstream import DownstreamOptions, run_downstream

    directory = report / "downstream" if report == Path("var/reports/demo") else report
    console.print(f"scenario downstream: serve and agent processes (reports in {directory})")
    result = run_downstream(DownstreamOptions(report_dir=directory), console)
    if not result["ok"]:
        raise typer.Exit(1)


def _require_demo_federation(federation: Path) -> None:
    if federation.is_file():
        return
    from app.resources import contracts_dir
    from app.user_errors import UserError

    packaged = contracts_dir() / federation.name
    raise UserError(
        f"--federation: {federation} not found in {Path.cwd()}",
        f"run fedload demo from the fedload checkout, or pass --federation {packaged}",
    )


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main() -> None:
    from app.cli_errors import run

    raise SystemExit(run(cli))
