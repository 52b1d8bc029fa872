"""The processes of the Spark HA runs outside the product (``bench/ha/heartbeat_starvation``;
the retired ``spark_partition`` driver used them too): a producer and Spark hosts
(``spark_host``), each the leader of its own session, spawned ahead so that their JVMs boot
in parallel, and the failure-free reference computed on the backup host meanwhile.

The crash scenario on Spark runs through the product (``fedload demo --scenario crash``,
``spark_jobs/scenarios/crash.py``); these are what its old driver shared with the others.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_jobs.ha.scenarios import TECHNIQUES
from spark_jobs.ha.spark_control import ActionClient
from spark_jobs.ha.spark_host import BUCKET_S, INPUT_STREAM

FRAGMENT = "counts"
Row = tuple[int, int, str, int]


@dataclass(frozen=True)
class StageTimings:
    """Seconds of input, the fragment's window, the detector's heartbeats and the start-up
    allowances (Spark needs 1 s buckets and seconds of warm-up)."""

    seconds: int = 14
    window_s: int = 2
    threshold: int = 3
    rate: float = 40.0
    seed: int = 31
    heartbeat_ms: int = 100
    misses: int = 3
    # From starting the queries to the first bucket's end: the first micro-batch compiles.
    warmup_s: float = 3.0
    startup_timeout_s: float = 180.0
    settle_timeout_s: float = 90.0


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


def fragment_plan(t: StageTimings, source: str, output: list[str], consumer: str | None) -> Any:
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
    """The processes of one run, spawned ahead so that JVMs boot in parallel; the backup host
    computes the failure-free reference meanwhile (which also warms its JVM up)."""

    def __init__(self, t: StageTimings, workdir: Path, technique: str, backup: str = "B2") -> None:
        """``technique`` "none": B alone; otherwise B and ``backup``, the second host's name
        (the partition scenario calls its replica R)."""
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
            # Python workers): B warms up on a few seconds of the input, the backup on all
            # of it,
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
