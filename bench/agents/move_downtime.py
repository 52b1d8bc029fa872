"""Move downtime between two agent processes vs Spark's own stop-and-restart, in one run.

python -m bench.agents.move_downtime [--moves 4] [--json FILE] [--workdir DIR]

A federation of real processes (``fedload serve`` and one ``fedload agent`` per participant,
``federation.yaml`` here) moves the stateful catalogue fragment O.x back and forth between S's
and T's agents: the benchmark, as admin, pins the declared loads S.base and T.base and raises the
giver's while it lowers the taker's, so the giver's agent offers O.x and the taker's accepts and
performs the move (the market's path: accept, prepare, release at the source, ship, restore,
commit, start). A move's downtime runs from the accepted offer (the registry's ``prepared_at`` of
the movement the accept created) to the first batch committed at the new host: the mtime of the
first commit file (``<checkpoint>/commits/<batch>``) the new host writes after the registry's
commit. Spark writes that file as a batch ends; the moved tar keeps the older files' mtimes, all
before the commit. That also covers a move whose new query fails to start and is started again by
the agent's next tick; the agent's own figure (``timings["first_batch"]`` in ``events.jsonl``,
from its prepare, seen in ``lastProgress``) is reported beside it when the agent has one.

The baseline is Spark's own stop-and-restart of the same query from the same checkpoint: the same
catalogue fragment, parameters, input schema, trigger and bucket settings, run by a
``FragmentRuntime`` in this process on a local SparkSession (``local[2]``, as each agent's)
reading the same seeded generator, published one second per wall second as the owner's agent
does. It is measured the same way: from the stop request to the first new commit file. One
restart round follows each move, so both sides share the machine's load. Before each move and
each restart the query has committed a few batches where it runs (steady state). The first move
(into an agent whose Spark has not run a query yet) and the first restart are warm-ups, reported
but not counted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.federation.document import FederationDoc, TaskSpec, load_federation
from app.participant.client import FedloadClient
from bench.runtime.run import machine
from spark_jobs.fragments import catalogue
from spark_jobs.runtime.dataplane import TokenSource, registry_tokens
from spark_jobs.runtime.host import FragmentRuntime, FragmentSpec, StreamRef
from spark_jobs.runtime.participant_host import (
    BUCKET_SECONDS,
    FIRST_BATCH_WAIT_SECONDS,
    generator_of,
)
from spark_jobs.runtime.transport import StreamClient, StreamServer, publish
from spark_jobs.runtime.warm import SUGGESTED_WARM_BUDGET_S, WARM_BUDGET_ENV
from spark_jobs.scenarios.processes import AgentSettings, ProcessFederation
from spark_jobs.session import build_session

FEDERATION = Path(__file__).with_name("federation.yaml")
DEFAULT_JSON = Path(__file__).resolve().parents[1] / "out" / "agents" / "move_downtime.json"
FRAGMENT, OWNER, GIVER, TAKER = "O.x", "O", "S", "T"
# The giver's declared base load: its threshold at these prices, so that O.x on top makes
# shedding pay whatever O.x measures; the taker's base goes to 0 so it has room. O's stays at 79:
# no room for O.x (see federation.yaml).
HIGH, LOW, OWNER_BASE = 80.0, 0.0, 79.0
# As SparkParticipantHost._spec builds a fragment's spec in an agent.
TRIGGER_SECONDS, MAX_BUCKETS_PER_BATCH = 0.5, 20
# Batches a query commits where it runs before it is moved or restarted again.
STEADY_BATCHES = 3
# The taker's mover marks these (seconds from its prepare of the movement): a stop-and-copy
# move (``relocate``) and a warm hand-off (``warm_relocate``). Each phase ends at its step.
STEPS = ("prepared", "released", "shipped", "restored", "committed", "resumed")
WARM_STEPS = ("prepared", "warming", "warmed", "released", "restored", "committed", "resumed")
MOVE_PHASES = {
    "accept_to_prepare": "accept -> the taker's mover prepares (reads movement, task, endpoints)",
    "release": "source: registry check, stop after last commit, pack",
    "ship": "checkpoint over Flight",
    "restore": "verify + unpack",
    "commit": "registry commit",
    "start": "fence + start() returns",
    "first_write": "start() returns -> first new batch in the output log",
}
WARM_PHASES = {
    "accept_to_prepare": "accept -> the taker's mover prepares (reads movement, task, endpoints)",
    "warming": "live snapshot (source runs on), install, start the copy",
    "warmed": "the copy's first batch and catch-up with the source's batches",
    "released": "source: registry check, stop after last commit, pack, pull",
    "restored": "check the copy's batches against the final checkpoint",
    "committed": "registry commit",
    "resumed": "fence + switch (sink writes, copy plans its own batches)",
    "first_write": "switch -> first new batch in the output log",
}
RESTART_PHASES = {
    "stop": "stop after last commit",
    "start": "start() returns",
    "first_write": "start() returns -> first new batch in the output log",
}
# Batches in the output log after the move (or restart) that close its output-gap window.
GAP_TAIL_BATCHES = 3


def _seconds(stamp: str) -> float:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"the registry sent a naive timestamp: {stamp}")
    return moment.timestamp()


def _task(doc: FederationDoc, name: str) -> TaskSpec:
    return next(t for t in doc.tasks if t.name == name)


def _git() -> dict[str, Any]:
    """The commit measured, and whether app/ or spark_jobs/ differed from it (other work)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=FEDERATION.parent
        ).stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "modified": git(
            "status", "--porcelain", "--", "../../app", "../../spark_jobs"
        ).splitlines(),
    }


def _directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def commits(directory: Path) -> dict[int, float]:
    """Batch id -> wall time its commit file was written (Spark writes it as the batch ends)."""
    found: dict[int, float] = {}
    if not directory.is_dir():
        return found
    for entry in directory.iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = entry.stat().st_mtime
            except FileNotFoundError:  # the directory is being replaced
                continue
    return found


def first_commit_after(directory: Path, after: float) -> tuple[int, float] | None:
    """(batch, wall time) of the earliest commit written after ``after``."""
    newer = [(at, batch) for batch, at in commits(directory).items() if at > after]
    if not newer:
        return None
    at, batch = min(newer)
    return batch, at


class WrittenBatches:
    """When each batch id first appears in an output log (``info()["written"]``, polled): the
    consumer's view of the fragment's output, whoever hosts it. A batch id is in the log once
    (a repeat is dropped), so every id is one batch that counted."""

    def __init__(
        self,
        location: Callable[[], str | None],
        stream: str,
        every: float = 0.02,
        tokens: TokenSource | None = None,
    ):
        self._location, self._stream, self._every = location, stream, every
        # The agents' endpoints refuse a call without a registry token; the baseline's own
        # server in this process takes none.
        self._tokens = tokens
        self.seen: dict[int, float] = {}
        self._stopped = threading.Event()
        threading.Thread(target=self._run, name=f"poll-{stream}", daemon=True).start()

    def _run(self) -> None:
        while not self._stopped.wait(self._every):
            try:
                # The owner's endpoint comes from the registry, which may be slow to answer on a
                # busy machine: an error here must not end the poll (it did once: no batch was
                # ever seen again and the run timed out).
                location = self._location()
                if location is None:
                    continue
                with StreamClient(location, timeout=1.0, tokens=self._tokens) as client:
                    written = client.info(self._stream)["written"]
            except Exception:  # the owner is busy or restarting: poll again
                continue
            now = time.time()
            for batch in written:
                self.seen.setdefault(int(batch), now)

    def first_after(self, after: float) -> tuple[int, float] | None:
        later = [(at, batch) for batch, at in list(self.seen.items()) if at > after]
        if not later:
            return None
        at, batch = min(later)
        return batch, at

    def close(self) -> None:
        self._stopped.set()


def output_gap(seen: dict[int, float], start: float, after: float) -> float | None:
    """The longest time no new batch reached the output log, from the last batch before
    ``start`` to the ``GAP_TAIL_BATCHES``-th batch after ``after``."""
    times = sorted(seen.values())
    before = [t for t in times if t <= start]
    tail = [t for t in times if t > after][:GAP_TAIL_BATCHES]
    if not before or len(tail) < GAP_TAIL_BATCHES:
        return None
    window = [before[-1], *(t for t in times if start < t <= tail[-1])]
    return max(b - a for a, b in itertools.pairwise(window))


def steady_interval(seen: dict[int, float]) -> float | None:
    """Median time between consecutive batches over the whole run (the fragment's cadence)."""
    times = sorted(seen.values())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else None


@dataclass
class Baseline:
    """The same fragment in this process, restarted in place from its own checkpoint."""

    doc: FederationDoc
    root: Path
    spark_conf: dict[str, str] = field(default_factory=dict)
    name: str = "baseline"
    stopped: threading.Event = field(default_factory=threading.Event)
    failed_queries: int = 0

    def __post_init__(self) -> None:
        fragment = _task(self.doc, FRAGMENT)
        source = _task(self.doc, fragment.inputs[0])
        assert fragment.fragment is not None and source.fragment is not None
        self.generator = generator_of(source.params)
        self.server = StreamServer()
        with StreamClient(self.server.location) as client:
            client.declare("input", BUCKET_SECONDS)
            client.declare("output", BUCKET_SECONDS)
        self.spec = FragmentSpec(
            name=self.name,
            build=catalogue.build(fragment.fragment, fragment.params),
            input_schema=catalogue.input_schema(source.fragment),
            inputs=(StreamRef(self.server.location, "input"),),
            output=StreamRef(self.server.location, "output"),
            bucket_seconds=BUCKET_SECONDS,
            trigger_seconds=TRIGGER_SECONDS,
            max_buckets_per_batch=MAX_BUCKETS_PER_BATCH,
        )
        self.spark = build_session(
            app_name="fedload-bench-agents-baseline",
            master="local[2]",
            shuffle_partitions=2,
            extra=dict(self.spark_conf),
        )
        self.runtime = FragmentRuntime(self.name, self.spark, self.root, server=self.server)
        threading.Thread(target=self._publish, name="baseline-source", daemon=True).start()
        self.output = WrittenBatches(lambda: self.server.location, "output")

    @property
    def commit_dir(self) -> Path:
        return self.runtime.checkpoint_dir(self.name) / "commits"

    def _publish(self) -> None:
        # One generator second per wall-clock second, as the owner's agent publishes O.conns.
        started = time.time()
        with StreamClient(self.server.location) as client:
            second = 0
            while not self.stopped.wait(max(0.0, started + second + 1 - time.time())):
                publish(client, "input", self.generator.second(second), BUCKET_SECONDS)
                second += 1

    def start(self) -> None:
        self.runtime.start(self.spec, epoch=0)

    def last_commit(self) -> int:
        return max(commits(self.commit_dir), default=-1)

    def steady_at(self, batch: int) -> bool:
        """Whether the query has committed ``batch``; a query that died meanwhile (a Python
        worker that could not connect back on a loaded machine, say) starts again from its
        checkpoint, as an agent's tick would."""
        if not self.runtime.is_running(self.name):
            self.failed_queries += 1
            self.runtime.stop(self.name)
            self.runtime.start(self.spec, epoch=0)
        return self.last_commit() >= batch

    def restart(self, timeout: float) -> dict[str, Any]:
        """Stop after the last committed batch, start from the checkpoint, first batch."""
        began = time.time()
        self.runtime.stop(self.name)
        stopped = time.time()
        last = self.last_commit()
        query = self.runtime.start(self.spec, epoch=0)
        started = time.time()
        failed_starts = 0
        deadline = time.monotonic() + timeout
        while query.lastProgress is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the baseline's query reported no batch within {timeout} s")
            if not query.isActive:
                # As an agent's next tick would: start it again from its checkpoint.
                failed_starts += 1
                query = self.runtime.start(self.spec, epoch=0)
            time.sleep(0.01)  # as the agent polls
        seen = time.time()
        new: dict[int, float] = {}
        while not new and time.monotonic() < deadline:
            new = {b: at for b, at in commits(self.commit_dir).items() if b > last}
            time.sleep(0.01)
        if not new:
            raise TimeoutError("the baseline's first batch wrote no commit file")
        committed = new[min(new)]
        first: tuple[int, float] | None = None
        while first is None and time.monotonic() < deadline:
            # After the stop: the batch in flight at the request is the old query's.
            first = self.output.first_after(stopped)
            time.sleep(0.01)
        if first is None:
            raise TimeoutError("the baseline's first batch reached no output log")
        written = first[1]
        return {
            "began": began,
            "stop": stopped - began,
            "start": started - stopped,
            "first_write": written - started,
            "total": written - began,
            "commit_total": committed - began,
            "seen_total": seen - began,
            "failed_starts": failed_starts,
            "checkpoint_bytes": _directory_bytes(self.runtime.checkpoint_dir(self.name)),
        }

    def close(self) -> None:
        self.stopped.set()
        self.output.close()
        try:
            self.runtime.close()
        finally:
            self.spark.stop()


def output_rows(admin: FedloadClient) -> int:
    location = admin.endpoint(OWNER)
    if location is None:
        return 0
    with StreamClient(location, tokens=registry_tokens(admin)) as client:
        return int(client.info(f"{FRAGMENT}.out")["rows"])


def set_base(admin: FedloadClient, participant: str, load: float) -> None:
    admin._call("PATCH", f"/v1/tasks/{participant}.base", json={"load": load, "pinned": True})


def commit_dir(fed: ProcessFederation, participant: str) -> Path:
    # SparkParticipantHost keeps a fragment's checkpoint at <data dir>/checkpoints/<fragment>.
    return fed.data_dir(participant) / "checkpoints" / FRAGMENT / "commits"


def wait_for(
    progress: Progress,
    fed: ProcessFederation,
    what: str,
    check: Callable[[], Any],
    timeout: float,
    every: float = 0.1,
) -> Any:
    job = progress.add_task(what)
    deadline = time.monotonic() + timeout
    last: Any = None
    try:
        while time.monotonic() < deadline:
            dead = {
                name: agent.process and agent.process.returncode
                for name, agent in fed.agents.items()
                if not agent.alive()
            }
            if dead:
                raise RuntimeError(f"agent(s) exited (name: return code) {dead} while {what}")
            try:
                last = check()
            except Exception as error:  # the service may be busy: keep asking
                last = error
            else:
                if last:
                    return last
            time.sleep(every)
        raise TimeoutError(f"timed out after {timeout} s {what} (last: {last!r})")
    finally:
        progress.remove_task(job)


def describe_move(
    admin: FedloadClient, event: dict[str, Any], first_write: tuple[int, float]
) -> dict[str, Any]:
    """One recorded move with the registry's view of it and its phases (seconds)."""
    movement = admin.movement(int(event["movement_id"]))
    offer = (
        admin._call("GET", f"/v1/offers/{movement['offer_id']}")
        if movement.get("offer_id") is not None
        else None
    )
    timings = {k: float(v) for k, v in event["timings"].items()}
    warm = "warming" in timings and "warm_fallback" not in timings
    steps = WARM_STEPS if warm else STEPS
    missing = [step for step in steps if step not in timings]
    if missing or not movement["finished_at"]:
        raise RuntimeError(f"move {movement['id']} lacks {missing or 'its commit'}: {movement}")
    prepared_at = _seconds(movement["prepared_at"])
    committed_at = _seconds(movement["finished_at"])
    batch, first_at = first_write
    # The taker's mover began at prepared_at + gap; its "committed" mark follows the registry's
    # commit by one HTTP response, so began ~ committed_at - timings["committed"].
    began = committed_at - timings["committed"]
    total = first_at - prepared_at
    if warm:
        phases = {"accept_to_prepare": began - prepared_at}
        for previous, step in itertools.pairwise(WARM_STEPS):
            phases[step] = timings[step] - timings[previous]
        phases["first_write"] = first_at - (began + timings["resumed"])
    else:
        phases = {
            "accept_to_prepare": began - prepared_at,
            "release": timings["released"] - timings["prepared"],
            "ship": timings["shipped"] - timings["released"],
            "restore": timings["restored"] - timings["shipped"],
            "commit": timings["committed"] - timings["restored"],
            "start": timings["resumed"] - timings["committed"],
            "first_write": first_at - (began + timings["resumed"]),
        }
    return {
        "warm": warm,
        "fallback": "warm_fallback" in timings,
        # Batches the warm copy was behind the source at the release (it ran them after).
        "lag_batches": timings.get("lag_batches"),
        "prepared_wall": prepared_at,
        "committed_wall": committed_at,
        # The source stops at its release: from there to the new host's first batch in the log.
        "release_to_first_write_s": first_at - (began + timings["warmed" if warm else "prepared"]),
        "movement_id": movement["id"],
        "from": event["src"],
        "to": event["dst"],
        "status": movement["status"],
        "reason": event["reason"],
        "price": event["price"],
        "state_bytes": event["state_bytes"],
        "timings": timings,
        "registry": {
            "offer_decided_at": offer and offer["decided_at"],
            "prepared_at": movement["prepared_at"],
            "committed_at": movement["finished_at"],
        },
        "first_write": {"batch": batch, "wall": first_at},
        "downtime_s": total,
        # The agent's own figure: its prepare -> first lastProgress of the new query, and when it
        # recorded the move (right after; after FIRST_BATCH_WAIT_SECONDS, or as soon as the new
        # query stops, without one).
        "agent_first_batch_s": timings.get("first_batch"),
        "agent_recorded_after_accept_s": float(event["wall"]) - prepared_at,
        "phases": phases,
    }


def run(args: argparse.Namespace, work: Path, console: Console) -> dict[str, Any]:
    doc = load_federation(FEDERATION)
    fed = ProcessFederation(
        doc,
        work / "federation",
        agent_settings=AgentSettings(
            offer_interval=2.0,
            spark_eager=True,
            hysteresis=0.005,
            # The same Spark settings for the agents and the baseline, so the ratio compares
            # moving with restarting under one configuration.
            extra_args=tuple(arg for conf in args.spark_conf for arg in ("--spark-conf", conf)),
        ),
    )
    # --plain: the agents move by stop-and-copy only (no warm hand-off), for comparison.
    agent_env = {WARM_BUDGET_ENV: "0"} if args.plain else {}
    if not args.plain:
        agent_env[WARM_BUDGET_ENV] = str(args.warm_budget)
    output: WrittenBatches | None = None
    baseline: Baseline | None = None
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    moves: list[dict[str, Any]] = []
    restarts: list[dict[str, Any]] = []
    try:
        with Progress(*columns, console=console, transient=True) as progress:
            job = progress.add_task("starting the service and the agents of O, S, T")
            fed.start()
            for name in (OWNER, GIVER, TAKER):
                fed.start_agent(name, env=agent_env)
            admin = fed.admin()
            output = out = WrittenBatches(
                lambda: admin.endpoint(OWNER), f"{FRAGMENT}.out", tokens=registry_tokens(admin)
            )
            set_base(admin, OWNER, OWNER_BASE)
            set_base(admin, GIVER, 10.0)
            set_base(admin, TAKER, LOW)
            progress.update(job, description="starting the baseline's Spark in this process")
            baseline = base = Baseline(
                doc, work / "baseline", spark_conf=dict(c.split("=", 1) for c in args.spark_conf)
            )
            base.start()
            progress.remove_task(job)
            wait_for(
                progress,
                fed,
                f"waiting for {FRAGMENT}'s first output at {GIVER}",
                lambda: output_rows(admin) > 0,
                timeout=args.timeout,
            )
            host, other = GIVER, TAKER
            for round_ in range(args.moves + 1):
                label = "warm-up" if round_ == 0 else f"{round_}/{args.moves}"
                steady = max(commits(commit_dir(fed, host)), default=-1) + STEADY_BATCHES
                wait_for(
                    progress,
                    fed,
                    f"move {label}: {FRAGMENT} to commit {STEADY_BATCHES} batches at {host}",
                    lambda host=host, steady=steady: (  # type: ignore[misc]
                        max(commits(commit_dir(fed, host)), default=-1) >= steady
                    ),
                    timeout=args.timeout,
                )
                # fed.moves() reads the agents' files in turn: find the new move by its id.
                seen = {m["movement_id"] for m in fed.moves()}
                set_base(admin, other, LOW)  # the taker makes room first
                set_base(admin, host, HIGH)
                event = wait_for(
                    progress,
                    fed,
                    f"move {label}: waiting for {host} to shed {FRAGMENT} to {other}",
                    lambda seen=seen: [m for m in fed.moves() if m["movement_id"] not in seen],  # type: ignore[misc]
                    timeout=args.timeout,
                )[0]
                if (event["task"], event["src"], event["dst"]) != (FRAGMENT, host, other):
                    raise RuntimeError(f"expected {FRAGMENT} {host} -> {other}, got {event}")
                committed_at = _seconds(admin.movement(int(event["movement_id"]))["finished_at"])
                # After the registry's commit the source is stopped and fenced: a batch new to
                # the output log is the new host's.
                first = wait_for(
                    progress,
                    fed,
                    f"move {label}: waiting for the first batch written from {other}",
                    lambda after=committed_at: out.first_after(after),  # type: ignore[misc]
                    timeout=args.timeout,
                    every=0.05,
                )
                move = describe_move(admin, event, first)
                move["counted"] = round_ > 0
                moves.append(move)
                agent = move["agent_first_batch_s"]
                kind = "warm" if move["warm"] else "stop-and-copy"
                console.log(
                    f"move {label} {host} -> {other} ({kind}): accept -> first write "
                    f"{move['downtime_s']:.2f} s, source stop -> first write "
                    f"{move['release_to_first_write_s']:.2f} s "
                    + (
                        f"(agent: {agent:.2f} s from its prepare)"
                        if agent is not None
                        else "(the agent saw no first batch: recorded "
                        f"{move['agent_recorded_after_accept_s']:.1f} s after the accept)"
                    )
                    + f", {move['state_bytes']:,} bytes of state"
                )
                steady = max(commits(base.commit_dir), default=-1) + STEADY_BATCHES
                wait_for(
                    progress,
                    fed,
                    f"restart {label}: the baseline to commit {STEADY_BATCHES} batches",
                    lambda steady=steady: base.steady_at(steady),  # type: ignore[misc]
                    timeout=args.timeout,
                )
                job = progress.add_task(f"restart {label}: stop, start, first batch")
                restart = base.restart(args.timeout)
                progress.remove_task(job)
                restart["counted"] = round_ > 0
                restarts.append(restart)
                console.log(
                    f"restart {label}: {restart['total']:.2f} s"
                    + (
                        f" ({restart['failed_starts']} failed starts)"
                        if restart["failed_starts"]
                        else ""
                    )
                )
                host, other = other, host
            # The last round's output-gap window closes a few batches after its restart.
            wait_for(
                progress,
                fed,
                "the last rounds' output-gap windows to close",
                lambda: (
                    len([t for t in base.output.seen.values() if t > restarts[-1]["began"]])
                    > GAP_TAIL_BATCHES
                    and len([t for t in out.seen.values() if t > moves[-1]["committed_wall"]])
                    > GAP_TAIL_BATCHES
                ),
                timeout=args.timeout,
            )
            checks = final_checks(fed, admin)
            for move in moves:
                move["output_gap_s"] = output_gap(
                    out.seen, move["prepared_wall"], move["committed_wall"]
                )
            for restart in restarts:
                restart["output_gap_s"] = output_gap(
                    base.output.seen, restart["began"], restart["began"]
                )
            checks["steady_interval_s"] = steady_interval(out.seen)
            checks["baseline_steady_interval_s"] = steady_interval(base.output.seen)
            checks["batches_written"] = len(out.seen)
            checks["baseline_failed_queries"] = base.failed_queries
    finally:
        if output is not None:
            output.close()
        if baseline is not None:
            baseline.close()
        fed.close()
    return summarise(moves, restarts, checks)


def final_checks(fed: ProcessFederation, admin: FedloadClient) -> dict[str, Any]:
    movements = [m for m in admin.movements() if m["task"] == FRAGMENT]
    owner_events = fed.data_dir(OWNER) / "events.jsonl"
    return {
        "owner_never_hosted": all(m["to"] != OWNER for m in movements)
        and not (owner_events.exists() and owner_events.read_text().strip()),
        "movements": len(movements),
        "committed": sum(m["status"] == "committed" for m in movements),
        "aborted": sum(m["status"] == "aborted" for m in movements),
        "host_at_end": admin.task(FRAGMENT)["host"],
        "output_rows_at_end": output_rows(admin),
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarise(
    moves: list[dict[str, Any]], restarts: list[dict[str, Any]], checks: dict[str, Any]
) -> dict[str, Any]:
    counted = [m for m in moves if m["counted"]]
    counted_restarts = [r for r in restarts if r["counted"]]
    seen = [m for m in counted if m["agent_first_batch_s"] is not None]
    downtime = _median([m["downtime_s"] for m in counted])
    restart = _median([r["total"] for r in counted_restarts])
    gap = _median([m["output_gap_s"] for m in counted if m["output_gap_s"] is not None])
    restart_gap = _median(
        [r["output_gap_s"] for r in counted_restarts if r["output_gap_s"] is not None]
    )
    phases = WARM_PHASES if any(m["warm"] for m in counted) else MOVE_PHASES
    agent_downtime = _median([m["agent_recorded_after_accept_s"] for m in seen])
    restart_seen = _median([r["seen_total"] for r in counted_restarts])
    return {
        "moves": moves,
        "restarts": restarts,
        "counted_moves": len(counted),
        "counted_restarts": len(counted_restarts),
        "warm_moves": sum(m["warm"] for m in counted),
        "fallback_moves": sum(m["fallback"] for m in counted),
        "move_phase_medians_s": {
            phase: _median([m["phases"][phase] for m in counted if phase in m["phases"]])
            for phase in phases
        },
        "output_gap_median_s": gap,
        "restart_output_gap_median_s": restart_gap,
        "gap_ratio": _ratio(gap, restart_gap),
        "release_to_first_write_median_s": _median(
            [m["release_to_first_write_s"] for m in counted]
        ),
        "restart_phase_medians_s": {
            phase: _median([r[phase] for r in counted_restarts]) for phase in RESTART_PHASES
        },
        "downtime_median_s": downtime,
        "restart_median_s": restart,
        "ratio": _ratio(downtime, restart),
        # The agents' own view (lastProgress polled every 10 ms), on the moves where they had one.
        "agent_seen_first_batch": f"{len(seen)}/{len(counted)}",
        "agent_downtime_median_s": agent_downtime,
        "restart_seen_median_s": restart_seen,
        "ratio_agent_view": _ratio(agent_downtime, restart_seen),
        "state_bytes_median": _median([m["state_bytes"] for m in counted]),
        "baseline_checkpoint_bytes_median": _median(
            [r["checkpoint_bytes"] for r in counted_restarts]
        ),
        "checks": checks,
    }


def _fmt(value: float | None, unit: str = " s") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def report(result: dict[str, Any], console: Console) -> None:
    table = Table(
        title=(
            f"Move between agent processes vs stop-and-restart ({result['counted_moves']} moves, "
            f"{result['warm_moves']} warm, {result['fallback_moves']} fell back; "
            f"{result['counted_restarts']} restarts; medians)"
        )
    )
    table.add_column("phase")
    table.add_column("what")
    table.add_column("median", justify="right")
    phases = WARM_PHASES if result["warm_moves"] else MOVE_PHASES
    for phase, what in phases.items():
        table.add_row(f"move: {phase}", what, _fmt(result["move_phase_medians_s"].get(phase)))
    table.add_row(
        "move: accept -> first write",
        "accepted offer -> first batch the new host writes (warming included)",
        _fmt(result["downtime_median_s"]),
    )
    table.add_row(
        "move: release -> first write",
        "the source's stop begins -> first batch the new host writes",
        _fmt(result["release_to_first_write_median_s"]),
    )
    table.add_row(
        "move: output gap",
        "longest time no new batch reached the output log, around the move",
        _fmt(result["output_gap_median_s"]),
        style="bold",
    )
    for phase, what in RESTART_PHASES.items():
        table.add_row(f"restart: {phase}", what, _fmt(result["restart_phase_medians_s"][phase]))
    table.add_row(
        "restart: total",
        "stop requested -> first batch in the output log",
        _fmt(result["restart_median_s"]),
    )
    table.add_row(
        "restart: output gap",
        "longest time no new batch reached the output log, around the restart",
        _fmt(result["restart_output_gap_median_s"]),
        style="bold",
    )
    table.add_row(
        "ratio: output gaps",
        "move gap / restart gap (target <= 1.0, aim 0.5)",
        _fmt(result["gap_ratio"], ""),
        style="bold",
    )
    table.add_row(
        "ratio: accept / stop",
        "accept -> first write / restart total (counts warming, while the source runs)",
        _fmt(result["ratio"], ""),
    )
    console.print(table)
    rounds = Table(title="Rounds (seconds; warm-up not counted)")
    columns = ("round", "move", "kind", "accept->write", "gap", "state B", "restart", "gap")
    for column in columns:
        rounds.add_column(column, justify="right")
    for index, (move, restart) in enumerate(zip(result["moves"], result["restarts"], strict=True)):
        rounds.add_row(
            str(index) if move["counted"] else "warm-up",
            f"{move['from']} -> {move['to']}",
            "warm" if move["warm"] else ("fell back" if move["fallback"] else "stop-copy"),
            _fmt(move["downtime_s"], ""),
            _fmt(move["output_gap_s"], ""),
            f"{move['state_bytes']:,}",
            _fmt(restart["total"], ""),
            _fmt(restart["output_gap_s"], ""),
        )
    console.print(rounds)
    console.print(f"checks: {result['checks']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--moves", type=int, default=4, help="counted moves (one warm-up more)")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the agents' sessions and the baseline's alike (repeatable)",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="write the results here")
    parser.add_argument(
        "--workdir", type=Path, help="keep the registry, agents' logs and checkpoints here"
    )
    parser.add_argument(
        "--timeout", type=float, default=240.0, help="seconds to wait for each step"
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="agents move by stop-and-copy only (FEDLOAD_WARM_BUDGET_S=0), for comparison",
    )
    parser.add_argument(
        "--warm-budget",
        type=float,
        default=SUGGESTED_WARM_BUDGET_S,
        help="seconds the agents give a warm copy to catch up (FEDLOAD_WARM_BUDGET_S, "
        "default %(default)s; the agents' own default is 0, stop-and-copy); always within the "
        "movement's lease (60 s here)",
    )
    args = parser.parse_args(argv)
    console = Console()
    load_before = os.getloadavg()
    code = _git()  # before the agents start: they import the working tree as it is now
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fedload-bench-agents-"))
    began = time.time()
    try:
        result = run(args, work, console)
    except BaseException:
        for name in (OWNER, GIVER, TAKER):
            log = work / "federation" / "agents" / name / "agent.log"
            if log.exists():
                lines = log.read_text(errors="replace").splitlines()
                # Without py4j's chatter (a line per callback from the JVM).
                tail = "\n".join([x for x in lines if "py4j.clientserver" not in x][-30:])
                console.print(f"--- {name}'s agent log ({log}) ---\n{tail}", markup=False)
        console.print(f"work directory kept: {work}")
        raise
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "machine": machine()
        | {"machine": platform.machine(), "nproc": os.cpu_count(), "load_before": load_before},
        "load_after": os.getloadavg(),
        "code": code,
        "agent_first_batch_wait_s": FIRST_BATCH_WAIT_SECONDS,
        "wall_seconds": time.time() - began,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        **result,
    }
    report(result, console)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str))
    console.print(f"wrote {args.json}")
    return 0 if result["checks"]["owner_never_hosted"] and result["gap_ratio"] is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
