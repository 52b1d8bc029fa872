"""The ``crash`` scenario on Spark: a stateful Spark fragment's host is SIGKILLed, once per
failover technique, and recovered through the runtime's movement path.

A (producer process, Flight log ``conns``) -> B (``connection_counts`` per 2 s window as a
Spark streaming query in its own process: SUnion -> fragment -> SOutput) -> C (the consumer: its
output logs live on the driver's ``StreamServer``). B2, the backup, is another Spark process.
Each host writes its own output stream on C (``out@B``, ``out@B2``): a backup resuming from an
older checkpoint, or from empty state, numbers its micro-batches differently from B, so SOutput's
dedup by batch id cannot merge them; C resynchronises by key (window end, source IP) instead,
as the consumer of an active standby does, and checks that a key seen on both streams has the
same content.

Per technique (``spark_host`` says what the primary does for each):
1. A, B, B2 start in parallel; B2 runs the failure-free reference (its JVM warms up with it);
2. B starts (and B2 for active standby); A publishes one bucket per second of wall time;
3. at ``fail_at_s`` every process of B's session gets SIGKILL;
4. the driver's ``FailureDetector`` pings B's heartbeat responder (a process of B's that dies
   with it, ``spark_jobs.ha.heartbeat``) every heartbeat and declares B failed after ``misses``
   silent intervals;
5. B2 takes over: ``relocate`` (``NoCheckpoint`` replaying A's log from B's state
   acknowledgement, or ``AlreadyShipped`` restoring B's last pushed checkpoint) or, active, the
   registry's prepare/commit; the registry (in-memory, served to B2 over Flight) moves the
   fragment to B2 at epoch 1 and B's stream is fenced at that epoch;
6. C switches to B2's stream; the run ends when C has every window the input closes.
Times: detection (kill -> failed), recovery (kill -> C's input frontier passes where it was at
the kill), added latency (first delivery at C minus the window's close on the clock, over the
median before the failure), and the CPU of every process between t0 and the kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.availability.detector import FailureDetector
from app.availability.heartbeats import wait_until_failed
from spark_jobs.ha.heartbeat import HeartbeatClient, port_of
from spark_jobs.ha.spark_control import ActionClient, ActionServer, registry_handlers
from spark_jobs.ha.spark_host import (
    BUCKET_S,
    INPUT_STREAM,
    first_bucket,
    generator,
    output_rows,
)
from spark_jobs.runtime.coordinator import InMemoryCoordinator
from spark_jobs.runtime.transport import FencedError, StreamClient, StreamLog, StreamServer

TECHNIQUES = ("upstream_backup", "passive_standby", "active_standby")
FRAGMENT = "counts"
Row = tuple[int, int, str, int]


@dataclass(frozen=True)
class SparkCrashTimings:
    seconds: int = 14
    fail_at_s: float = 6.0
    window_s: int = 2
    threshold: int = 3
    rate: float = 40.0
    seed: int = 31
    heartbeat_ms: int = 100
    misses: int = 3
    checkpoint_every_s: float = 1.0
    # From starting the queries to the first bucket's end: the first micro-batch compiles.
    warmup_s: float = 3.0
    startup_timeout_s: float = 180.0
    settle_timeout_s: float = 90.0

    @classmethod
    def quick(cls) -> SparkCrashTimings:
        return cls(seconds=12, fail_at_s=5.0)


def timings_like(t: Any) -> SparkCrashTimings:
    """The Spark run for the python engine's ``Timings``: the same heartbeats; quick or not.
    (Spark needs 1 s buckets and seconds of warm-up, so the rest does not carry over.)"""
    from spark_jobs.ha.scenarios import Timings

    base = SparkCrashTimings.quick() if t.duration_ms <= Timings.quick().duration_ms else None
    return replace(base or SparkCrashTimings(), heartbeat_ms=t.heartbeat_ms, misses=t.misses)


class Processes:
    """Child processes, each the leader of its own session: a SIGKILL to every member of B's
    session is the crash of B's machine (Python driver, JVM, Python workers at once)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, *args: str) -> None:
        ready = self.workdir / f"{name}.ready"
        ready.unlink(missing_ok=True)
        with (self.workdir / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "spark_jobs.ha.spark_host", *args, "--ready", str(ready)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def ready(self, timeout: float) -> dict[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        found: dict[str, dict[str, Any]] = {}
        while len(found) < len(self.procs):
            for name, proc in self.procs.items():
                path = self.workdir / f"{name}.ready"
                if name not in found and path.exists():
                    found[name] = json.loads(path.read_text())
                elif proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode}; see {self.workdir / name}.log"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes not ready after {timeout} s: {found.keys()}")
            time.sleep(0.1)
        return found

    def _members(self, name: str) -> list[tuple[int, list[str]]]:
        session = self.procs[name].pid
        members = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session:
                members.append((int(entry.name), fields))
        return members

    def cpu_seconds(self, name: str) -> float:
        """User + system CPU of every process in the session (reaped children included)."""
        ticks = sum(sum(int(f) for f in fields[11:15]) for _, fields in self._members(name))
        return ticks / os.sysconf("SC_CLK_TCK")

    def kill(self, name: str) -> None:
        for pid, _ in self._members(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.procs[name].wait(timeout=10)

    def close(self) -> None:
        # Hosts before the producer: a query whose input vanished logs an error and stops.
        names = [n for n in reversed(self.procs) if self.procs[n].poll() is None]
        for name in names:
            try:
                info = json.loads((self.workdir / f"{name}.ready").read_text())
                with ActionClient(info["control"]) as client:
                    client.call("shutdown", timeout=2)
            except Exception:
                pass
        deadline = time.monotonic() + 20
        for name in names:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.procs[name].wait(timeout=max(0.1, deadline - time.monotonic()))
        for name in self.procs:
            # Whatever is left of the session (a JVM that outlived its driver, workers).
            if self._members(name):
                self.kill(name)


class Consumer:
    """C: delivers each window once, by key, from whichever stream it currently follows."""

    def __init__(self, log: StreamLog, stream: str) -> None:
        self.log = log
        self.current = stream
        self.delivered: dict[tuple[int, str], Row] = {}
        self.origin: dict[tuple[int, str], str] = {}
        self.first_seen: dict[tuple[int, str], float] = {}
        self.frontier = -1
        self.frontier_log: list[tuple[float, int]] = []
        # Each stream's boundary as C saw it change: when the new host caught up.
        self.boundaries: dict[str, int] = {}
        self.stream_log: list[tuple[float, str, int]] = []
        self.log_duplicates: dict[str, int] = {}
        self.conflicts: set[tuple[int, str]] = set()
        self.resynced: set[tuple[int, str]] = set()
        self.switches: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.poll()
            except Exception as error:
                self.errors.append(f"{type(error).__name__}: {error}")

    def switch(self, stream: str) -> None:
        with self._lock:
            self.switches.append({"from": self.current, "to": stream, "at": time.time()})
            self.current = stream

    def poll(self) -> None:
        with self._lock:
            stream = self.current
            rows = output_rows(self.log.table(stream))
            boundary = self.log.info(stream)["boundary"]
            now = time.time()
            counts = Counter((r[0], r[2]) for r in rows)
            self.log_duplicates[stream] = sum(c - 1 for c in counts.values())
            for row in rows:
                key = (row[0], row[2])
                if key not in self.delivered:
                    self.delivered[key] = row
                    self.origin[key] = stream
                    self.first_seen[key] = now
                elif self.origin[key] != stream:
                    # Already delivered from the failed host: dropped, but it must agree.
                    self.resynced.add(key)
                    if self.delivered[key] != row:
                        self.conflicts.add(key)
            if boundary is not None and boundary > self.frontier:
                self.frontier = boundary
                self.frontier_log.append((now, boundary))
            if boundary is not None and self.boundaries.get(stream) != boundary:
                self.boundaries[stream] = boundary
                self.stream_log.append((now, stream, boundary))

    def output(self) -> list[Row]:
        with self._lock:
            return sorted(self.delivered.values())


def fragment_plan(
    t: SparkCrashTimings, source: str, output: list[str], consumer: str | None
) -> Any:
    return {
        "name": FRAGMENT,
        "input": [source, INPUT_STREAM],
        "output": output,
        "window_s": t.window_s,
        "threshold": t.threshold,
        "bucket_s": BUCKET_S,
        "trigger_s": 0.2,
        "max_buckets": 3,
        "consumer": consumer,
    }


def wait_until(done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _stale_write_refused(location: str, stream: str) -> bool:
    """What a resurrected B would do: append a micro-batch with its old epoch 0."""
    empty = pa.table({"stime": pa.array([], pa.timestamp("us", tz="UTC"))})
    try:
        with StreamClient(location) as client:
            client.append(stream, empty, batch_id=1_000_000, epoch=0)
    except FencedError:
        return True
    return False


def _detect(heartbeat: str, t: SparkCrashTimings) -> float:
    """Heartbeats to B's heartbeat responder until the detector declares B failed; returns that
    moment. The responder dies with B (spark_jobs.ha.heartbeat), so its silence is B's death.
    The one heartbeat loop and rule of app.availability: each ping waits for its answer to the
    end of the window, and only a wait that ended unanswered there fails B."""
    detector = FailureDetector(time.monotonic, interval=t.heartbeat_ms / 1000, misses=t.misses)
    detector.heard("B")
    client = HeartbeatClient(port_of(heartbeat))
    try:
        wait_until_failed(detector, "B", lambda _peer, timeout: client.ping(timeout))
    finally:
        client.close()
    return time.time()


def latencies(
    first_seen: dict[tuple[int, str], float], t0: float, epoch_s: float, killed: float | None
) -> Any:
    """Latency of a window: its first delivery at C minus its close on the clock. Baseline: the
    median of those delivered before the kill (all, without one); added: the worst one above."""
    values = []
    for key, seen in first_seen.items():
        closes = key[0] / 1e6 - epoch_s
        values.append((closes, seen - (t0 + closes), killed is None or seen < killed))
    if not values:
        return {"baseline_latency_ms": None, "max_latency_ms": None, "max_added_latency_ms": None}
    before = [lat for _, lat, early in values if early]
    baseline = statistics.median(before) if before else 0.0
    worst = max(lat for _, lat, _ in values)
    return {
        "baseline_latency_ms": round(baseline * 1000, 1),
        "max_latency_ms": round(worst * 1000, 1),
        "max_added_latency_ms": round((worst - baseline) * 1000, 1),
        # Per window close (s into the input): the worst first-delivery latency, for diagnosis.
        "latency_by_window_ms": {
            f"{closes:g}": round(max(lat for c, lat, _ in values if c == closes) * 1000)
            for closes in sorted({c for c, _, _ in values})
        },
    }


class Stage:
    """The processes of one technique's run, spawned ahead so that JVMs boot in parallel; B2
    computes the failure-free reference meanwhile (which also warms its JVM up)."""

    def __init__(
        self, t: SparkCrashTimings, workdir: Path, technique: str, backup: str = "B2"
    ) -> None:
        """``backup``: the second host's name (the partition scenario calls its replica R)."""
        if technique not in ("none", *TECHNIQUES):
            raise ValueError(f"technique must be none or one of {TECHNIQUES}, got {technique!r}")
        self.t = t
        self.technique = technique
        self.procs = Processes(workdir)
        self.spawned_at = time.time()
        self.procs.spawn("A", "source", "--seed", str(t.seed), "--rate", str(t.rate))
        self.backup = backup
        self.hosts = ["B"] if technique == "none" else ["B", backup]
        for name in self.hosts:
            self.procs.spawn(name, "host", "--name", name, "--root", str(workdir / name))
        self.info: dict[str, dict[str, Any]] = {}
        self.reference: list[Row] | None = None
        self.phases: dict[str, float] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._prepare, daemon=True)
        self._thread.start()

    def _prepare(self) -> None:
        try:
            self.info = self.procs.ready(self.t.startup_timeout_s)
            self.phases["startup_s"] = round(time.time() - self.spawned_at, 2)
            # A cold JVM takes seconds over its first stateful micro-batch (planning, RocksDB,
            # Python workers): B warms up on a few seconds of the input, B2 on all of it,
            # which is the reference. Both at once.
            warm_up = threading.Thread(target=self._reference, args=("B", 4), daemon=True)
            warm_up.start()
            if self.backup in self.info:
                answer = self._reference(self.backup, self.t.seconds)
                self.reference = [(int(r[0]), int(r[1]), str(r[2]), int(r[3])) for r in answer]
            warm_up.join()
        except BaseException as error:
            self._error = error

    def _reference(self, host: str, seconds: int) -> list[Any]:
        began = time.time()
        with ActionClient(self.info[host]["control"]) as client:
            plan = fragment_plan(self.t, self.info["A"]["location"], ["", "out"], None)
            answer: list[Any] = client.call(
                "reference", plan=plan, seed=self.t.seed, rate=self.t.rate, seconds=seconds
            )
        self.phases[f"reference_{host}_s"] = round(time.time() - began, 2)
        return answer

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        self._thread.join()
        self.procs.close()


def run_technique(
    t: SparkCrashTimings,
    workdir: Path,
    technique: str,
    *,
    fail: bool = True,
    stage: Stage | None = None,
) -> dict[str, Any]:
    """One run; ``technique`` "none" (no backup, no failure) is the overhead baseline.
    ``stage``: its processes, if spawned ahead (they are closed here)."""
    stage = stage or Stage(t, workdir, technique)
    fail = fail and technique != "none"
    gen = generator(t.seed, t.rate)
    first = first_bucket(gen)
    epoch_s = gen.epoch.timestamp()
    procs = stage.procs
    c_server = StreamServer()
    registry = InMemoryCoordinator({FRAGMENT: "B"})
    registry_server = ActionServer(registry_handlers(registry))
    consumer: Consumer | None = None
    try:
        for stream in ("out@B", "out@B2"):
            c_server.log.declare(stream, BUCKET_S)
        stage.wait()
        info, reference = stage.info, stage.reference
        a, b = ActionClient(info["A"]["control"]), ActionClient(info["B"]["control"])
        source = info["A"]["location"]
        c = c_server.location
        b2 = ActionClient(info["B2"]["control"]) if "B2" in info else None
        replica_plan = fragment_plan(
            t, source, [c, "out@B2"], f"{FRAGMENT}@B2" if technique == "active_standby" else None
        )
        # The replica first: its acknowledgement name must be known to A before B's first ack.
        if b2 is not None and technique == "active_standby":
            b2.call("start", plan=replica_plan, epoch=0, replay_from=first)
        b.call(
            "start",
            plan=fragment_plan(t, source, [c, "out@B"], None),
            epoch=0,
            replay_from=first,
            technique=technique,
            backup=info["B2"]["location"] if technique == "passive_standby" else None,
            ship_every_s=t.checkpoint_every_s,
        )
        t0 = time.time() + t.warmup_s
        a.call("play", t0=t0, seconds=t.seconds)
        consumer = Consumer(c_server.log, "out@B")
        consumer.start()
        time.sleep(max(0.0, t0 - time.time()))
        cpu_start = {name: procs.cpu_seconds(name) for name in procs.procs}
        time.sleep(max(0.0, t0 + t.fail_at_s - time.time()))
        cpu = {name: procs.cpu_seconds(name) - cpu_start[name] for name in procs.procs}
        report: dict[str, Any] = {
            "technique": technique,
            "engine": "spark",
            "phases": stage.phases,
            "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
            "cpu_window_s": t.fail_at_s,
            "total_cpu_seconds": round(sum(cpu.values()), 3),
        }
        checks: dict[str, bool] = {}
        killed: float | None = None
        cpu_dead: dict[str, float] = {}
        if fail:
            assert b2 is not None

            def under_way() -> bool:
                # A mid-stream crash: B has delivered windows to C and has something for its
                # backup (a shipped checkpoint; a state acknowledgement past the start). On a
                # loaded machine that may come after fail_at_s.
                if not consumer.delivered:
                    return False
                if technique == "passive_standby":
                    return bool(b.call("status", fragment=FRAGMENT, timeout=5)["shipments"])
                if technique == "upstream_backup":
                    return int(a.call("info")["acks"].get(f"{FRAGMENT}.state", first)) > first
                return True

            wait_until(under_way, t.seconds + 60, "B to be under way before the crash")
            b_status = b.call("status", fragment=FRAGMENT, timeout=5)
            report["delivered_before_kill"] = len(consumer.delivered)
            cpu_dead = {"B": procs.cpu_seconds("B")}
            procs.kill("B")
            killed = time.time()
            # Read after the kill: B's last batches up to its death count as before.
            frontier_at_kill = consumer.frontier
            detected = _detect(info["B"]["heartbeat"], t)
            replay_from = None
            if technique == "upstream_backup":
                replay_from = int(a.call("info")["acks"][f"{FRAGMENT}.state"])
            take = b2.call(
                "take_over",
                plan=replica_plan,
                technique=technique,
                source="B",
                registry=registry_server.location,
                replay_from=replay_from,
                old_output=[c, "out@B"],
                timeout=120,
            )
            consumer.switch("out@B2")
            taken = time.time()
            # Past where C was at the kill, or, if B had already passed the end of the input,
            # the end again (then nothing can be past it).
            target = min(frontier_at_kill + 1, first + t.seconds - 1)

            def caught_up() -> float | None:
                return next(
                    (
                        at
                        for at, stream, boundary in list(consumer.stream_log)
                        if stream == "out@B2" and boundary >= target and at >= killed
                    ),
                    None,
                )

            wait_until(lambda: caught_up() is not None, t.settle_timeout_s, "C's input to advance")
            recovered = caught_up() or time.time()
            shipments = b_status["shipments"]
            report.update(
                {
                    "killed_at_s": round(killed - t0, 3),
                    "b_exit_code": procs.procs["B"].returncode,
                    "detection_ms": round((detected - killed) * 1000, 1),
                    "take_over_ms": round((taken - killed) * 1000, 1),
                    "recovery_ms": round((recovered - killed) * 1000, 1),
                    "replay_from_bucket": None if replay_from is None else replay_from - first,
                    "movement": take,
                    "checkpoints_shipped": len(shipments),
                    # The whole checkpoint and the last shipment's size (a delta after the first).
                    "checkpoint_bytes": shipments[-1]["full_bytes"] if shipments else 0,
                    "last_shipment_bytes": shipments[-1]["bytes"] if shipments else 0,
                    "delta_shipments": sum(1 for s in shipments if s["delta"]),
                    # Sent in all, against whole packs every period (what shipping cost before
                    # deltas): the same run's baseline.
                    "shipped_bytes": sum(s["bytes"] for s in shipments),
                    "whole_pack_bytes": sum(s["full_bytes"] for s in shipments),
                    "checkpoint_ship_s": shipments[-1]["ship_s"] if shipments else None,
                    "b_errors": b_status["errors"],
                }
            )
            checks["failover_committed"] = (
                registry.host(FRAGMENT) == "B2"
                and registry.current_epoch(FRAGMENT) == take["epoch"] == 1
                and registry.status(int(take["movement_id"])) == "committed"
            )
            checks["old_host_fenced"] = _stale_write_refused(c, "out@B")
        last = first + t.seconds - 1

        def complete() -> bool:
            boundary = c_server.log.info(consumer.current)["boundary"] if consumer else None
            return boundary is not None and boundary >= last

        wait_until(complete, t.settle_timeout_s, "the consumer's stream to pass the end of input")
        time.sleep(0.5)
        # The work of the whole input, recovery included: on a busy machine a starved process
        # uses less CPU in a fixed window because it does less, so this is the fairer cost.
        cpu_run = {
            name: (cpu_dead[name] if name in cpu_dead else procs.cpu_seconds(name))
            - cpu_start[name]
            for name in procs.procs
        }
        report["cpu_seconds_whole_run"] = {k: round(v, 3) for k, v in cpu_run.items()}
        report["total_cpu_seconds_whole_run"] = round(sum(cpu_run.values()), 3)
        report["run_s"] = round(time.time() - t0, 2)
        consumer.stop()
        output = consumer.output()
        report.update(
            {
                "switches": consumer.switches,
                "rows_out": len(output),
                "resynced_duplicates_dropped": len(consumer.resynced),
                "log_duplicates": consumer.log_duplicates,
                "consumer_errors": consumer.errors,
                **latencies(consumer.first_seen, t0, epoch_s, killed),
            }
        )
        if reference is not None:
            report["reference_rows"] = len(reference)
            report["difference"] = {
                "missing": len(set(reference) - set(output)),
                "extra": len(set(output) - set(reference)),
            }
            checks["output_matches_reference"] = bool(reference) and output == reference
        checks["no_duplicates"] = (
            not consumer.conflicts
            and all(n == 0 for n in consumer.log_duplicates.values())
            and len(output) == len({(r[0], r[2]) for r in output})
        )
        if fail:
            checks["consumer_on_new_host"] = (
                consumer.current == "out@B2" and registry.host(FRAGMENT) == "B2"
            )
        report["checks"] = checks
        return report
    finally:
        if consumer is not None:
            consumer.stop()
        stage.close()
        registry_server.shutdown()
        c_server.shutdown()


def run(
    report_dir: Path,
    timings: SparkCrashTimings | None = None,
    techniques: tuple[str, ...] | list[str] = TECHNIQUES,
) -> dict[str, Any]:
    """All techniques, one after the other; the report as the python engine's crash report."""
    t = timings or SparkCrashTimings()
    # All JVMs boot together (they dominate a run); the first run shares the machine with the
    # others' boot and reference, so its timings are noisier: the benchmark runs them apart.
    stages = {tech: Stage(t, report_dir / "nodes" / tech, tech) for tech in techniques}
    try:
        runs = {
            tech: run_technique(t, report_dir / "nodes" / tech, tech, stage=stages[tech])
            for tech in techniques
        }
    finally:
        for stage in stages.values():
            stage.close()
    checks = {
        f"{tech}.{check}": passed
        for tech, result in runs.items()
        for check, passed in result["checks"].items()
    }
    checks["output_matches_reference"] = all(
        r["checks"].get("output_matches_reference", False) for r in runs.values()
    )
    return {
        "scenario": "crash",
        "engine": "spark",
        "techniques": runs,
        "spark_timings": asdict(t),
        "checks": checks,
    }
