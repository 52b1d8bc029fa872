"""``fedload demo``: the Borealis load-management demo, live, on one machine.

The service runs on SQLite in a thread; one agent per participant talks to it over HTTP, with its
own fragment runtime (Flight server, checkpoint root) on one shared SparkSession. Time is stepped:
each step is one statistics interval of the federation's timeline, so the agents' decisions are
reproducible; ``pace`` stretches each step over wall time for a person watching. The run ends
with a report directory and checks; the command exits non-zero when a check fails.
"""

from __future__ import annotations

import math
import secrets
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from app.db.migrate import upgrade
from app.db.session import unit_of_work
from app.federation.apply import apply_federation
from app.federation.document import FederationDoc, load_federation
from app.market.allocation import Standing, check_allocation
from app.participant.bpm_decisions import BpmDecisions
from app.participant.client import FedloadClient
from app.participant.node import Agent, MoveEvent
from app.server import serve_in_thread
from app.settings import Settings
from spark_jobs.demo.fragments import (
    NOMINAL_RATE,
    ProgressRates,
    Traffic,
    choose_real_tasks,
    fragment_spec,
    reference_rows,
    rows_of,
)
from spark_jobs.demo.live import render
from spark_jobs.demo.loads import DeclaredLoads, MeasuredLoads, Meter
from spark_jobs.demo.movers import DemoMover
from spark_jobs.demo.report import write_report
from spark_jobs.runtime import FragmentRuntime, FragmentSpec
from spark_jobs.session import build_session


@dataclass(frozen=True)
class DemoOptions:
    federation: Path = Path("contracts/borealis-demo.yaml")
    report_dir: Path = Path("var/reports/demo")
    duration: float | None = None  # simulated seconds; default the federation's own
    time_scale: float = 1.0  # multiplies every time in the federation (tests shorten it)
    pace: float = 0.0  # wall seconds per simulated second; 0 = as fast as it goes
    ui: bool = True
    real_fragments: int = 2
    host: str = "127.0.0.1"
    port: int = 0
    database_url: str | None = None


def scaled(doc: FederationDoc, factor: float) -> FederationDoc:
    """The same federation with every time multiplied by ``factor`` (timeline, joins, offers)."""
    if factor == 1.0:
        return doc
    return replace(
        doc,
        participants=tuple(
            replace(p, joins_at=None if p.joins_at is None else p.joins_at * factor)
            for p in doc.participants
        ),
        contracts=tuple(
            replace(c, min_move_seconds=c.min_move_seconds * factor) for c in doc.contracts
        ),
        timeline=tuple(replace(e, at=e.at * factor) for e in doc.timeline),
        simulation=replace(
            doc.simulation,
            offer_interval_seconds=max(
                doc.simulation.step_seconds, doc.simulation.offer_interval_seconds * factor
            ),
            duration_seconds=doc.simulation.duration_seconds * factor,
        ),
    )


def acceptable_allocation(
    decisions: Mapping[str, BpmDecisions],
    thresholds: Mapping[str, float],
    hosted: Mapping[str, Mapping[str, float]],
) -> tuple[bool, str]:
    """DESIGN.md's acceptable allocation on the agents' measured loads, judged as the simulator
    judges it (``app.market.allocation``): at task granularity and with the hysteresis band, so
    that a real fragment's measured load wobbling by a unit around a threshold is not an
    unacceptable allocation, while a participant with a whole task to shed still is."""
    standings = []
    for name, tasks in hosted.items():
        model = decisions[name].model
        load = sum(tasks.values())
        threshold = thresholds[name]
        standings.append(
            Standing(
                name=name,
                model=model,
                load=load,
                threshold=threshold,
                price=model.derivative(threshold),
                smallest_task=min((v for v in tasks.values() if v > 0), default=None),
            )
        )
    hysteresis = next(iter(decisions.values())).hysteresis if decisions else 0.0
    judged = check_allocation(standings, delta=hysteresis)
    return judged.acceptable, "; ".join(judged.reasons)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# Wall seconds between one agent's beats that still count as on time in the demo's loop.
DEMO_HEARTBEAT_SECONDS = 5.0


def run_demo(options: DemoOptions, console: Console | None = None) -> dict[str, Any]:
    console = console or Console()
    doc = scaled(load_federation(options.federation), options.time_scale)
    step = doc.simulation.step_seconds
    duration = options.duration or doc.simulation.duration_seconds
    work = Path(tempfile.mkdtemp(prefix="fedload-demo-"))
    database_url = options.database_url or f"sqlite:///{work / 'registry.db'}"
    admin_key = secrets.token_urlsafe(16)
    # One loop drives every agent here, one heartbeat per simulated step, and a step that holds a
    # Spark move takes a few wall seconds: at the service's default 1 s interval its wall-clock
    # detector would call healthy agents suspect (the table showed every agent suspect at the end).
    settings = Settings(
        database_url=database_url,
        admin_key=admin_key,
        environment="development",
        heartbeat_interval_seconds=max(DEMO_HEARTBEAT_SECONDS, options.pace * step),
    )
    upgrade(database_url)
    with unit_of_work(database_url) as session:
        keys = apply_federation(session, doc, actor=f"file:{options.federation}").new_keys

    with serve_in_thread(settings, host=options.host, port=options.port) as url:
        console.print(
            f"service: {url}  (admin UI {url}/admin, key {admin_key}; API docs {url}/docs)"
        )
        return _run(doc, options, console, url, admin_key, keys, work, step, duration)


def _run(
    doc: FederationDoc,
    options: DemoOptions,
    console: Console,
    url: str,
    admin_key: str,
    keys: dict[str, str],
    work: Path,
    step: float,
    duration: float,
) -> dict[str, Any]:
    clock = _Clock()
    admin = FedloadClient(url, admin_key)
    clients = {name: FedloadClient(url, key) for name, key in keys.items()}
    spark = build_session(app_name="fedload-demo", master="local[2]", shuffle_partitions=2)
    runtimes = {
        p.name: FragmentRuntime(p.name, spark, work / "checkpoints" / p.name)
        for p in doc.participants
    }
    real_names = choose_real_tasks(doc, options.real_fragments)
    traffic = Traffic.start(real_names)
    kinds = {t.name: t.fragment for t in doc.tasks}
    owners = {t.name: t.owner for t in doc.tasks}
    real: dict[str, FragmentSpec] = {
        name: fragment_spec(name, str(kinds[name]), traffic, runtimes[owners[name]])
        for name in real_names
    }
    rates = ProgressRates(runtimes)
    declared = DeclaredLoads(doc, clock)
    measured = MeasuredLoads(
        declared, lambda t: rates.rate(t, step), dict.fromkeys(real_names, NOMINAL_RATE)
    )
    mover = DemoMover(clients, runtimes, real)
    moves: list[MoveEvent] = []
    decisions = {
        p.name: BpmDecisions.for_participant(p, doc.simulation.hysteresis) for p in doc.participants
    }
    agents = {
        p.name: Agent(
            p.name,
            clients[p.name],
            decisions[p.name],
            Meter(measured),
            mover,
            offer_interval=doc.simulation.offer_interval_seconds,
            on_move=moves.append,
        )
        for p in doc.participants
    }
    capacity = {p.name: p.capacity for p in doc.participants}
    joins = {p.name: p.joins_at or 0.0 for p in doc.participants}
    loads: dict[str, list[dict[str, float | None]]] = {p.name: [] for p in doc.participants}
    acceptable_series: list[tuple[float, bool]] = []
    try:
        for name in real_names:
            runtimes[owners[name]].start(real[name], epoch=0)
        with (
            Live(console=console, refresh_per_second=4, transient=False)
            if options.ui
            else _Quiet() as live
        ):
            while clock.now <= duration:
                started = time.monotonic()
                traffic.emit(int(clock.now))
                for name in real_names:
                    rates.sample(name)
                liveness = {
                    p["name"]: p["liveness"] for p in admin._call("GET", "/v1/participants")
                }
                present = [n for n in agents if joins[n] <= clock.now]
                for name in present:
                    agents[name].tick(clock.now, liveness=liveness)
                    state = agents[name].state
                    loads[name].append(
                        {
                            "at": clock.now,
                            "load": state.load,
                            "threshold": state.threshold,
                            "marginal_cost": _finite(state.marginal_cost),
                        }
                    )
                ok, reason = acceptable_allocation(
                    {n: decisions[n] for n in present},
                    {n: agents[n].state.threshold for n in present},
                    {n: agents[n].state.hosted for n in present},
                )
                acceptable_series.append((clock.now, ok))
                live.update(
                    render(
                        clock.now,
                        [
                            (
                                n,
                                liveness.get(n, "unknown") if n in present else "not joined",
                                agents[n].state.load,
                                agents[n].state.threshold,
                                capacity[n],
                                agents[n].state.marginal_cost,
                                len(agents[n].state.hosted),
                            )
                            for n in agents
                        ],
                        moves,
                        ok,
                        reason,
                    )
                )
                clock.now += step
                if options.pace > 0:
                    time.sleep(max(0.0, options.pace * step - (time.monotonic() - started)))
        return _finish(
            doc,
            options,
            console,
            admin,
            agents,
            runtimes,
            traffic,
            real,
            owners,
            moves,
            loads,
            acceptable_series,
            mover,
        )
    finally:
        for runtime in runtimes.values():
            runtime.close()
        traffic.server.shutdown()
        for client in [admin, *clients.values()]:
            client.close()


def _finish(
    doc: FederationDoc,
    options: DemoOptions,
    console: Console,
    admin: FedloadClient,
    agents: dict[str, Agent],
    runtimes: dict[str, FragmentRuntime],
    traffic: Traffic,
    real: dict[str, FragmentSpec],
    owners: dict[str, str],
    moves: list[MoveEvent],
    loads: dict[str, list[dict[str, float | None]]],
    acceptable_series: list[tuple[float, bool]],
    mover: DemoMover,
) -> dict[str, Any]:
    outputs_match: dict[str, bool] = {}
    output_differences: dict[str, dict[str, Any]] = {}
    reference_host = runtimes[next(iter(runtimes))]
    for name, spec in real.items():
        host = next(r for r in runtimes.values() if r.is_running(name))
        host.query(name).processAllAvailable()
        host.stop(name)
        got = rows_of(runtimes[owners[name]].server, f"{name}.out")
        expected = reference_rows(spec, traffic, reference_host)
        outputs_match[name] = bool(expected) and got == expected
        if not outputs_match[name]:
            output_differences[name] = _difference(got, expected)
    ledgers = [admin._call("GET", f"/v1/contracts/{c['id']}/ledger") for c in admin.contracts()]
    balances: dict[str, float] = {}
    for ledger in ledgers:
        for party, amount in ledger["balances"].items():
            balances[party] = balances.get(party, 0.0) + amount
    payments_total = sum(ledger["total_paid"] for ledger in ledgers)
    final_ok = acceptable_series[-1][1] if acceptable_series else False
    first_ok_after_last_event = _settled_at(acceptable_series, doc)
    report: dict[str, Any] = {
        "federation": doc.name,
        "real_fragments": sorted(real),
        "moves": [
            {
                "task": m.task,
                "from": m.src,
                "to": m.dst,
                "reason": m.reason,
                "at": m.at,
                "price": m.price,
            }
            for m in moves
        ],
        "loads": loads,
        "timeline": [
            {"at": e.at, "event": e.event, "participant": e.participant} for e in doc.timeline
        ],
        "payments": {"total": payments_total, "net_by_participant": balances},
        "move_timings": mover.timings,
        # What the agents could not do (a refused offer call, a failed move): kept for diagnosis.
        "agent_errors": {name: list(agent.state.errors) for name, agent in agents.items()},
        "acceptable_since": first_ok_after_last_event,
        "acceptable": [{"at": t, "acceptable": ok} for t, ok in acceptable_series],
        "checks": {
            "output_matches_reference": bool(outputs_match) and all(outputs_match.values()),
            "acceptable_at_end": final_ok,
            "payments_balance": abs(sum(balances.values())) < 1e-9,
            "moves_happened": bool(moves),
        },
        "outputs": outputs_match,
        # What a failed output check saw, so a report says lost, duplicated or wrong rows.
        "output_differences": output_differences,
    }
    write_report(options.report_dir, report)
    for check, passed in report["checks"].items():
        console.print(f"{'[green]pass[/]' if passed else '[red]FAIL[/]'} {check}")
    console.print(f"report: {options.report_dir / 'report.json'}")
    return report


def _difference(
    got: list[tuple[object, ...]], expected: list[tuple[object, ...]]
) -> dict[str, Any]:
    missing = Counter(expected) - Counter(got)
    unexpected = Counter(got) - Counter(expected)
    return {
        "rows": len(got),
        "expected_rows": len(expected),
        "missing": sum(missing.values()),
        "unexpected": sum(unexpected.values()),
        "missing_examples": [list(map(str, row)) for row in sorted(missing)[:5]],
        "unexpected_examples": [list(map(str, row)) for row in sorted(unexpected)[:5]],
    }


def _settled_at(series: list[tuple[float, bool]], doc: FederationDoc) -> float | None:
    last_event = max([e.at for e in doc.timeline] + [0.0])
    since: float | None = None
    for at, ok in series:
        if at < last_event:
            continue
        if ok and since is None:
            since = at
        elif not ok:
            since = None
    return since


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class _Quiet:
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, _: object) -> None:
        return None


RunDemo = Callable[[DemoOptions], dict[str, Any]]
