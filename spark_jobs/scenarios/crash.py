"""``fedload demo --scenario crash``: the host of three fragments is SIGKILLed; the product fails
them over, one per recovery type.

``fedload serve`` and one ``fedload agent`` per participant of ``crash-federation.yaml``: S hosts
G.x, R.x, P.x and V.x (one per owner), T holds their replicas under contracts that ask ``gap``,
``rollback`` and ``precise`` (P.x's a passive standby, V.x's an active one: T runs a DPC copy of
it, which takes over without a restart, ``spark_jobs.runtime.promote``). The driver only does
what an owner and an operator would: each owner places its task's replica (``POST
/v1/tasks/{name}/replicas``), and once S ships P.x's standby, T keeps R.x's upstream backup and
T's copy of V.x writes its own log, S's agent gets SIGKILL. From there it is the agents'
and the registry's: the registry sees S failed, T asks for the three failovers and carries them
out by the contracts' recovery types. The driver watches and measures:

- detection: SIGKILL -> the registry lists S as failed;
- per task, ``recovery_seconds``: SIGKILL -> the task's output boundary passes where it stood at
  the kill (the new host caught up), and ``takeover_seconds``: from T starting that task's
  takeover to the same moment (T takes the tasks over one after the other, so this is the
  time each path costs on its own);
- per task, ``lost`` and ``duplicated``: output rows missing from, and written beyond, the
  failure-free reference (the same fragment over the same seeded input, run here).

It writes ``report.json`` with ``processes`` (participant -> pid of its agent) and ``recovery``
(one entry per type); the checks: precise output equals the reference, rollback lost nothing,
gap's output resumed after the failure with its loss counted.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from rich.console import Console

from app.dataplane.streams import replica_stream
from app.federation.document import load_federation
from app.participant.client import FedloadClient
from spark_jobs.runtime.dataplane import RegistryTokens, registry_tokens
from spark_jobs.runtime.failover import FAILOVERS, backup_consumer, standby_consumer
from spark_jobs.runtime.transport import HOLD_ALL, StreamClient
from spark_jobs.scenarios.harness import running, wait_until, waits_so_far
from spark_jobs.scenarios.processes import Placement, ProcessFederation
from spark_jobs.scenarios.reference import check_rows, live_rows
from spark_jobs.scenarios.replicas import RunOptions, scenario_federation
from spark_jobs.session import build_session

FEDERATION = Path(__file__).with_name("crash-federation.yaml")
HOST, HOLDER = "S", "T"
# Task -> (the technique its owner places its replica with); the recovery type is the contract's.
REPLICAS = {
    "G.x": "upstream_backup",
    "R.x": "upstream_backup",
    "P.x": "passive_standby",
    "V.x": "active_standby",
}
# Task -> the report's name for its case: the contract's recovery type, and "active" for the
# precise recovery by the active replica.
RECOVERY_OF = {"G.x": "gap", "R.x": "rollback", "P.x": "precise", "V.x": "active"}


@dataclass(frozen=True)
class CrashOptions(RunOptions):
    report_dir: Path = Path("var/reports/demo/crash")
    # Seconds of output after the standby is in place before the SIGKILL, and of output after
    # every task recovered before the comparison (windows are 4 s).
    before_kill_s: float = 6.0
    after_recovery_s: float = 10.0
    recovery_timeout_s: float = 180.0


_OPERATOR_TOKENS: dict[int, RegistryTokens] = {}


def _operator_tokens(admin: FedloadClient) -> RegistryTokens:
    """The operator's read tokens (the agents' endpoints refuse calls without one), one source
    per admin client of the scenario (a client is not hashable: keyed by identity)."""
    if id(admin) not in _OPERATOR_TOKENS:
        _OPERATOR_TOKENS[id(admin)] = registry_tokens(admin)
    return _OPERATOR_TOKENS[id(admin)]


def _info(admin: FedloadClient, owner: str, stream: str) -> dict[str, Any]:
    location = admin.endpoint(owner)
    assert location is not None
    with StreamClient(location, tokens=_operator_tokens(admin)) as client:
        return client.info(stream)


def _held(admin: FedloadClient, owner: str, stream: str, consumer: str) -> bool:
    ack = _info(admin, owner, stream)["acks"].get(consumer)
    return ack is not None and ack > HOLD_ALL


def _has_output(admin: FedloadClient, owner: str, task: str) -> bool:
    return bool(_info(admin, owner, f"{task}.out")["rows"] > 0)


def _copy_covered(admin: FedloadClient) -> bool:
    """T's copy of V.x has written its first window, and S's output has passed it: from then on
    the copy covers what S has not emitted (a takeover by it is precise)."""
    copy = _info(admin, HOLDER, replica_stream("V.x", HOLDER))
    primary = _info(admin, "V", "V.x.out")["boundary"]
    return copy["first"] is not None and primary is not None and primary > copy["first"]


def run_crash(
    options: CrashOptions, console: Console | None = None, spark: SparkSession | None = None
) -> dict[str, Any]:
    console = console or Console()
    doc = load_federation(FEDERATION)
    eager = Placement(args=("--spark-eager",))
    # No trading: only the failovers move anything. Owners run no Spark (their tasks are
    # sources); the host and the holder start theirs with their agents.
    fed = scenario_federation(
        doc, options, {HOST: eager, HOLDER: eager}, "crash", lease_seconds=15.0
    )
    with running(fed, console) as admin:
        return _run(options, console, fed, admin, spark)


def _run(
    options: CrashOptions,
    console: Console,
    fed: ProcessFederation,
    admin: FedloadClient,
    spark: SparkSession | None,
) -> dict[str, Any]:
    owners = {task: task.split(".")[0] for task in REPLICAS}
    for task, technique in REPLICAS.items():
        fed.client(owners[task])._call(
            "POST", f"/v1/tasks/{task}/replicas", json={"k": 1, "technique": technique}
        )
    with console.status("S starts the fragments; T's standby and upstream backup fill ..."):
        for task, owner in owners.items():
            wait_until(
                f"{task} to write output at {HOST}",
                partial(_has_output, admin, owner, task),
                options.startup_timeout_s,
            )
        wait_until(
            "S to ship P.x's standby to T",
            lambda: _held(admin, "P", "P.conns.out", standby_consumer("P.x")),
            options.startup_timeout_s,
        )
        wait_until(
            "T to keep R.x's upstream backup",
            lambda: _held(admin, "R", "R.conns.out", backup_consumer("R.x")),
            options.startup_timeout_s,
        )
        wait_until(
            "S's V.x output to pass the first window of T's active copy",
            partial(_copy_covered, admin),
            options.startup_timeout_s,
        )
        time.sleep(options.before_kill_s)
    early = {t: h for t in REPLICAS if (h := admin.task(t)["host"]) != HOST}
    if early:
        # The registry saw S failed while it was alive (its heartbeats lapsed): no crash to
        # measure. Say so rather than report a failover nobody caused.
        console.print(f"[red]failed over before the kill (a false suspicion of {HOST}): {early}")
        report: dict[str, Any] = {
            "scenario": "crash",
            "processes": fed.processes(),
            "failed_over_before_kill": early,
            "checks": {"no_failover_before_kill": False},
            "ok": False,
        }
        options.report_dir.mkdir(parents=True, exist_ok=True)
        (options.report_dir / "report.json").write_text(json.dumps(report, indent=2))
        return report
    processes = fed.processes()
    before = {task: _info(admin, owners[task], f"{task}.out") for task in REPLICAS}
    console.print(f"SIGKILL {HOST}'s agent (pid {processes[HOST]})")
    killed = time.monotonic()
    fed.agents[HOST].kill()
    detected: float | None = None
    recovered: dict[str, float] = {}
    # Wall time of each recovery, to set against the takeover's start in T's failover log.
    recovered_wall: dict[str, float] = {}
    with console.status("the registry detects the failure; T takes the fragments over ..."):
        deadline = killed + options.recovery_timeout_s
        while len(recovered) < len(REPLICAS) and time.monotonic() < deadline:
            now = time.monotonic()
            if detected is None:
                seen = {p["name"]: p["liveness"] for p in admin.participants()}
                if seen.get(HOST) == "failed":
                    detected = now - killed
            for task in REPLICAS:
                if task in recovered:
                    continue
                boundary = _info(admin, owners[task], f"{task}.out")["boundary"]
                was = before[task]["boundary"]
                passed = boundary is not None and (was is None or boundary > was)
                if passed and admin.task(task)["host"] == HOLDER:
                    recovered[task] = now - killed
                    recovered_wall[task] = time.time()
            time.sleep(0.2)
    if len(recovered) == len(REPLICAS):
        time.sleep(options.after_recovery_s)
    return _finish(
        options, console, fed, admin, spark, processes, before, detected, recovered, recovered_wall
    )


def _finish(
    options: CrashOptions,
    console: Console,
    fed: ProcessFederation,
    admin: FedloadClient,
    spark: SparkSession | None,
    processes: dict[str, int],
    before: dict[str, dict[str, Any]],
    detected: float | None,
    recovered: dict[str, float],
    recovered_wall: dict[str, float],
) -> dict[str, Any]:
    tasks = {t["name"]: t for t in admin.tasks()}
    events = _failovers(fed.data_dir(HOLDER))
    live, after = {}, {}
    for task in RECOVERY_OF:
        owner = admin.endpoint(tasks[task]["owner"])
        assert owner is not None
        after[task] = _info(admin, tasks[task]["owner"], f"{task}.out")
        live[task] = live_rows(owner, f"{task}.out", _operator_tokens(admin))
    # The output is read: T's Spark stops, so that the reference runs have the machine.
    fed.close([HOLDER])
    console.print("comparing each fragment's output with a run without failures ...")
    session = spark or build_session(app_name="fedload-crash-reference", master="local[1]")
    recovery: dict[str, dict[str, Any]] = {}
    references: dict[str, Any] = {}  # P.x and V.x read the same input: one reference run
    try:
        for task, kind in RECOVERY_OF.items():
            record = tasks[task]
            source = tasks[record["inputs"][0]["task"]]
            comparison = check_rows(
                session, live[task], record, source["params"], references=references
            )
            event = events.get(task, {})
            took = recovered_wall.get(task)
            recovery[kind] = {
                "task": task,
                "from": HOST,
                "to": record["host"],
                "recovered": task in recovered,
                "recovery_seconds": recovered.get(task),
                "takeover_seconds": (
                    None if took is None or "began" not in event else took - event["began"]
                ),
                "lost": comparison.missing,
                "duplicated": comparison.unexpected,
                "rows": comparison.rows,
                "expected_rows": comparison.expected_rows,
                "rows_before_kill": before[task]["rows"],
                "rows_at_end": after[task]["rows"],
                # Where the loss lies, in buckets (seconds): window ends at or after the output
                # boundary at the kill, and (gap) at or before where the new host resumed.
                "boundary_at_kill": before[task]["boundary"],
                "lost_window_ends": [_seconds(end) for end in comparison.missing_window_ends],
                "performed_as": event.get("recovery"),
                # "restart" (from a checkpoint or empty state) or "running_copy" (active).
                "path": event.get("path"),
                "replay_from": event.get("replay_from"),
                # Active: the bucket the copy computed from (it started before the kill).
                "copy_from": event.get("copy_from"),
                "movement_timings": event.get("timings"),
                "output": comparison.as_dict(),
            }
    finally:
        if spark is None:
            session.stop()
    gap, rollback, precise = recovery["gap"], recovery["rollback"], recovery["precise"]
    active = recovery["active"]
    report: dict[str, Any] = {
        "scenario": "crash",
        "processes": processes,
        "failure": {"killed": HOST, "pid": processes.get(HOST), "signal": "SIGKILL"},
        "detection_seconds": detected,
        "recovery": recovery,
        "checks": {
            "host_detected_failed": detected is not None,
            "every_task_failed_over": all(
                r["recovered"] and r["to"] == HOLDER for r in recovery.values()
            ),
            "precise_output_matches_reference": precise["output"]["matches"],
            "precise_by_standby": precise["performed_as"] == "precise",
            "rollback_nothing_lost": rollback["recovered"] and rollback["lost"] == 0,
            "gap_output_resumes": gap["recovered"] and gap["rows_at_end"] > gap["rows_before_kill"],
            "active_by_running_copy": active["path"] == "running_copy",
            "active_output_matches_reference": active["output"]["matches"],
        },
    }
    report["ok"] = all(report["checks"].values())
    report["waits"] = waits_so_far()
    options.report_dir.mkdir(parents=True, exist_ok=True)
    (options.report_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    for kind, r in recovery.items():
        console.print(
            f"{kind:9s} {r['task']}: recovered in {r['recovery_seconds']} s "
            f"({r['takeover_seconds']} s after its takeover began, {r['path']}), "
            f"lost {r['lost']}, duplicated {r['duplicated']} of {r['expected_rows']} rows"
        )
    for check, passed in report["checks"].items():
        console.print(f"{'[green]pass[/]' if passed else '[red]FAIL[/]'} {check}")
    console.print(f"report: {options.report_dir / 'report.json'}")
    return report


def _seconds(moment: datetime) -> int:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return int(aware.timestamp())


def _failovers(data_dir: Path) -> dict[str, dict[str, Any]]:
    path = data_dir / FAILOVERS
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["task"]: row for row in rows}
