"""What each recovery type costs while nothing fails, with agents as processes.

Issue 13 asks, per recovery type, for the runtime overhead against no high availability. One run
per technique, each a federation of its own (``overhead-federation.yaml``, the contract's recovery
type filled in): ``fedload serve`` and one ``fedload agent`` per participant; S hosts one stateful
fragment, O.x (O's generator at 30 connections/s), T holds nothing at first. Each run measures a
window with no replica (its own baseline, same processes, same minute), then places O.x's replica
on T as its owner would (``POST /v1/tasks/O.x/replicas``), waits until the replica is in effect
and measures a second window:

| run | contract's recovery | technique | in effect when |
| --- | --- | --- | --- |
| rollback | rollback | upstream backup | T holds O's output log for O.x |
| precise (passive) | precise | passive standby | S has shipped O.x's checkpoint to T |
| precise (active) | precise | active standby | T's copy writes its own log |

``gap`` is not run: a gap replica keeps nothing while nothing fails (the holder restarts the
fragment from empty state when the host fails), so it costs nothing by construction.

Per window: CPU seconds per wall second of every process tree of the federation (each agent with
its JVM and Python workers, and the service), and O.x's median micro-batch duration (offset-log
file -> commit file) and interval at S. CPU time is what a technique costs whatever else the
machine runs; batch durations move with the machine's load. The figure per technique is the
ratio of the two windows of the same run.

    PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
      .venv/bin/python -m bench.ha.agents_overhead [--window 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.dataplane.streams import replica_stream
from app.federation.document import load_federation
from app.participant.client import FedloadClient
from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.runtime.failover import backup_consumer, standby_consumer
from spark_jobs.runtime.transport import HOLD_ALL, StreamClient
from spark_jobs.scenarios.harness import running, wait_until
from spark_jobs.scenarios.processes import AgentSettings, Placement, ProcessFederation

TEMPLATE = Path(__file__).with_name("overhead-federation.yaml")
HOST, HOLDER, OWNER, TASK = "S", "T", "O", "O.x"
DEFAULT_JSON = Path("bench/out/ha/agents_overhead.json")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Run:
    name: str
    recovery: str
    technique: str


RUNS = (
    Run("rollback", "rollback", "upstream_backup"),
    Run("precise (passive)", "precise", "passive_standby"),
    Run("precise (active)", "precise", "active_standby"),
)


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of the process and of its children it has waited for)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # The command name may hold spaces and parentheses: the fields start after the last ")".
        fields = raw[raw.rindex(")") + 2 :].split()
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
        table[int(entry.name)] = (int(fields[1]), ticks / CLOCK_TICKS)
    return table


def tree_cpu(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each root's whole process tree (the agent, its JVM, the JVM's
    Python workers): a child that exits is counted by its waiting parent's cutime."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    totals: dict[str, float] = {}
    for name, root in roots.items():
        total, stack = 0.0, [root]
        while stack:
            pid = stack.pop()
            if pid in table:
                total += table[pid][1]
                stack.extend(children.get(pid, []))
        totals[name] = total
    return totals


def batch_times(checkpoint: Path, since: float, until: float) -> tuple[list[float], list[float]]:
    """Durations (offset-log file -> commit file) and intervals between commits of the batches
    that committed inside [since, until]."""

    def mtimes(directory: Path) -> dict[int, float]:
        found: dict[int, float] = {}
        if directory.is_dir():
            for entry in directory.iterdir():
                if entry.name.isdigit():
                    try:
                        found[int(entry.name)] = entry.stat().st_mtime
                    except FileNotFoundError:
                        continue
        return found

    offsets, commits = mtimes(checkpoint / "offsets"), mtimes(checkpoint / "commits")
    inside = sorted(b for b, t in commits.items() if since <= t <= until)
    durations = [commits[b] - offsets[b] for b in inside if b in offsets]
    ends = [commits[b] for b in inside]
    intervals = [later - earlier for earlier, later in itertools.pairwise(ends)]
    return durations, intervals


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _info(admin: FedloadClient, owner: str, stream: str) -> dict[str, Any]:
    location = admin.endpoint(owner)
    assert location is not None
    with StreamClient(location, tokens=registry_tokens(admin)) as client:
        return client.info(stream)


def _held(admin: FedloadClient, owner: str, stream: str, consumer: str) -> bool:
    ack = _info(admin, owner, stream)["acks"].get(consumer)
    return ack is not None and ack > HOLD_ALL


def _writes(admin: FedloadClient) -> bool:
    return int(_info(admin, OWNER, f"{TASK}.out")["rows"]) > 0


def _replica_writes(admin: FedloadClient) -> bool:
    location = admin.endpoint(HOLDER)
    assert location is not None
    with StreamClient(location, tokens=registry_tokens(admin)) as client:
        return int(client.info(replica_stream(TASK, HOLDER))["rows"]) > 0


def in_effect(admin: FedloadClient, technique: str) -> Callable[[], bool]:
    """When the replica costs what it will cost from then on."""
    if technique == "upstream_backup":
        return partial(_held, admin, OWNER, f"{OWNER}.conns.out", backup_consumer(TASK))
    if technique == "passive_standby":
        return partial(_held, admin, OWNER, f"{OWNER}.conns.out", standby_consumer(TASK))
    return partial(_replica_writes, admin)


def measure(fed: ProcessFederation, window: float, console: Console, label: str) -> dict[str, Any]:
    roots = fed.processes()
    with console.status(f"{label}: measuring {window:.0f} s ..."):
        began, cpu_before, load_before = time.time(), tree_cpu(roots), os.getloadavg()[0]
        time.sleep(window)
        ended, cpu_after = time.time(), tree_cpu(roots)
    seconds = ended - began
    cpu = {name: (cpu_after[name] - cpu_before[name]) / seconds for name in roots}
    durations, intervals = batch_times(fed.data_dir(HOST) / "checkpoints" / TASK, began, ended)
    return {
        "seconds": seconds,
        "cpu_per_second": cpu,
        "cpu_total": sum(cpu.values()),
        "batches": len(durations),
        "median_batch_s": _median(durations),
        "median_interval_s": _median(intervals),
        "load": [load_before, os.getloadavg()[0]],
    }


def one_run(run: Run, args: argparse.Namespace, work: Path, console: Console) -> dict[str, Any]:
    federation = work / f"{run.technique}.yaml"
    federation.write_text(TEMPLATE.read_text().format(recovery=run.recovery))
    eager = Placement(args=("--spark-eager",))
    fed = ProcessFederation(
        load_federation(federation),
        work / run.technique,
        admin_key=secrets.token_urlsafe(16),
        # Generous: nothing is meant to fail here, and a loaded machine stretches agents' ticks.
        heartbeat_interval=10.0,
        agent_settings=AgentSettings(offer_interval=3600.0),
        placements={HOST: eager, HOLDER: eager},
    )
    with running(fed, console) as admin:
        wait_until(f"{TASK} to write output at {HOST}", partial(_writes, admin), args.timeout)
        # A first run measured the first window after start-up at 1.3x the CPU of the next with
        # nothing changed (JIT, the first batches' planning): wait it out, and measure the
        # baseline twice so that its own noise is in the report.
        time.sleep(args.warmup)
        first = measure(fed, args.window, console, f"{run.name}: no replica")
        without = measure(fed, args.window, console, f"{run.name}: no replica, again")
        fed.client(OWNER)._call(
            "POST", f"/v1/tasks/{TASK}/replicas", json={"k": 1, "technique": run.technique}
        )
        wait_until(f"{run.name}: {TASK}'s replica", in_effect(admin, run.technique), args.timeout)
        time.sleep(args.settle)
        with_replica = measure(fed, args.window, console, f"{run.name}: replica on {HOLDER}")
        host = admin.task(TASK)["host"]
    result = {
        "run": run.name,
        "recovery": run.recovery,
        "technique": run.technique,
        "without_first": first,
        "without": without,
        "baseline_noise": abs(first["cpu_total"] - without["cpu_total"]) / without["cpu_total"],
        "with": with_replica,
        "cpu_ratio": with_replica["cpu_total"] / without["cpu_total"],
        "host_at_end": host,
    }
    if without["median_batch_s"] and with_replica["median_batch_s"]:
        result["batch_ratio"] = with_replica["median_batch_s"] / without["median_batch_s"]
    console.print(
        f"{run.name:18s} CPU {without['cpu_total']:.2f} -> {with_replica['cpu_total']:.2f} s/s "
        f"({result['cpu_ratio']:.2f}x)"
    )
    return result


def report(results: list[dict[str, Any]], console: Console) -> None:
    table = Table(title=f"What a replica of {TASK} costs while nothing fails (same run each)")
    columns = (
        "recovery",
        "CPU s/s without (twice)",
        "with",
        "ratio",
        "S",
        "T",
        "batch",
        "interval",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "recovery" else "right")
    for r in results:
        without, with_ = r["without"], r["with"]

        def pair(key: str, w: dict[str, Any] = without, v: dict[str, Any] = with_) -> str:
            a, b = w[key], v[key]
            return "-" if a is None or b is None else f"{a:.2f} -> {b:.2f}"

        table.add_row(
            r["run"],
            f"{r['without_first']['cpu_total']:.2f}, {without['cpu_total']:.2f}",
            f"{with_['cpu_total']:.2f}",
            f"{r['cpu_ratio']:.2f}",
            f"{without['cpu_per_second'][HOST]:.2f} -> {with_['cpu_per_second'][HOST]:.2f}",
            f"{without['cpu_per_second'][HOLDER]:.2f} -> {with_['cpu_per_second'][HOLDER]:.2f}",
            pair("median_batch_s"),
            pair("median_interval_s"),
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured per step")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after each change")
    parser.add_argument(
        "--warmup", type=float, default=30.0, help="seconds of output before the first window"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per wait")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--only", action="append", default=[], help="technique(s) to run (default: all three)"
    )
    args = parser.parse_args()
    console = Console()
    began = time.time()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fedload-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    runs = [r for r in RUNS if not args.only or r.technique in args.only]
    result: dict[str, Any] = {"runs": [one_run(r, args, work, console) for r in runs]}
    code = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    result |= {
        "machine": {"machine": platform.machine(), "nproc": os.cpu_count()},
        "code": code,
        "wall_seconds": time.time() - began,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    report(result["runs"], console)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
