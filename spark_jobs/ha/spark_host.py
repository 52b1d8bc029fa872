"""The processes of the Spark HA scenarios outside the product: a producer and a Spark host.

python -m spark_jobs.ha.spark_host source --ready FILE [--seed N --rate R]
python -m spark_jobs.ha.spark_host host --name B --root DIR --ready FILE

``source`` (producer A): a Flight stream log ``conns`` that a seeded connection generator fills
one bucket per second as the wall clock passes the bucket's end; the log keeps every bucket
until all its consumers acknowledged it (upstream backup's output queue).

``host`` (B, R): its own local SparkSession, a ``FragmentRuntime`` (Flight server: output
logs) and a control endpoint: ``start`` runs the fragment, ``reference`` computes the
failure-free output. (The crash scenario, with its failover techniques, runs through the
product: ``spark_jobs/scenarios/crash.py``.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_jobs.generators import ConnectionGenerator, RateSchedule
from spark_jobs.ha.heartbeat import Responder
from spark_jobs.ha.spark_control import ActionServer, Handler, spec_of
from spark_jobs.runtime.host import FragmentRuntime
from spark_jobs.runtime.transport import StreamClient, StreamServer, publish

BUCKET_S = 1.0
INPUT_STREAM = "conns"


def generator(seed: int, rate: float) -> ConnectionGenerator:
    return ConnectionGenerator(seed=seed, schedule=RateSchedule.constant(rate), scan_rate=4)


def first_bucket(gen: ConnectionGenerator) -> int:
    return int(gen.epoch.timestamp() // BUCKET_S)


def output_rows(table: pa.Table) -> list[tuple[int, int, str, int]]:
    """A fragment output log as sorted (window end us, window start us, src_ip, connections)."""
    if table.num_rows == 0:
        return []
    ends = table.column("stime").cast(pa.int64()).to_pylist()
    starts = table.column("window_start").cast(pa.int64()).to_pylist()
    ips = table.column("src_ip").to_pylist()
    counts = table.column("connections").to_pylist()
    return sorted(zip(ends, starts, ips, counts, strict=True))


def _write_ready(path: Path, info: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(info))
    os.replace(partial, path)


class Source:
    """Producer A: publishes second s of the generator at wall time t0 + s + 1."""

    def __init__(self, gen: ConnectionGenerator) -> None:
        self.gen = gen
        self.server = StreamServer()
        self.server.log.declare(INPUT_STREAM, BUCKET_S)
        self.published = 0
        self.stopped = threading.Event()

    def handlers(self) -> dict[str, Handler]:
        return {
            "ping": lambda: {"published": self.published},
            "play": self.play,
            "info": lambda: self.server.log.info(INPUT_STREAM),
            "shutdown": self.stopped.set,
        }

    def play(self, t0: float, seconds: int) -> None:
        threading.Thread(target=self._play, args=(t0, seconds), daemon=True).start()

    def _play(self, t0: float, seconds: int) -> None:
        with StreamClient(self.server.location) as client:
            for second in range(seconds):
                if self.stopped.wait(max(0.0, t0 + second + 1 - time.time())):
                    return
                publish(client, INPUT_STREAM, self.gen.second(second), BUCKET_S)
                self.published = second + 1


class SparkHost:
    def __init__(self, name: str, root: Path) -> None:
        from spark_jobs.session import build_session

        self.name = name
        self.root = root
        # Heartbeats are answered by a process of their own, started from the main thread (its
        # parent-death signal follows the thread that started it): see spark_jobs.ha.heartbeat.
        self.heartbeat = Responder()
        # One core per host: B and B2 share the machine's two with the producer and driver.
        self.spark = build_session(app_name=f"ha-{name}", master="local[1]", shuffle_partitions=2)
        self.runtime = FragmentRuntime(name, self.spark, root / "checkpoints")
        self.stopped = threading.Event()
        self._references = 0
        self._stalls: list[tuple[float, float]] = []

    def handlers(self) -> dict[str, Handler]:
        return {
            "ping": lambda: {"name": self.name},
            "start": self.start,
            "status": self.status,
            "reference": self.reference,
            "stop": self.runtime.discard,
            "probe_stalls": self.probe_stalls,
            "stalls": lambda: list(self._stalls),
            "shutdown": self.stopped.set,
        }

    def probe_stalls(self, seconds: float, tick_s: float = 0.005) -> None:
        """For ``bench/ha/heartbeat_starvation``: a thread of this process that sleeps
        ``tick_s`` at a time and records (when, how late) each wake-up later than 50 ms. It needs
        the GIL to wake up, as every Python heartbeat handler here does."""

        def run() -> None:
            end = time.monotonic() + seconds
            while (now := time.monotonic()) < end:
                time.sleep(tick_s)
                late = time.monotonic() - now - tick_s
                if late > 0.05:
                    self._stalls.append((time.time(), round(late, 4)))

        threading.Thread(target=run, name="stall-probe", daemon=True).start()

    def start(self, plan: dict[str, Any], epoch: int, replay_from: int) -> None:
        self.runtime.start(spec_of(plan), epoch=epoch, replay_from=replay_from)

    def status(self, fragment: str) -> dict[str, Any]:
        running = self.runtime.is_running(fragment)
        sink = self.runtime.sink(fragment) if running else None
        return {
            "running": running,
            "written": sink.written if sink else None,
            "skipped": sink.skipped if sink else None,
        }

    def reference(self, plan: dict[str, Any], seed: int, rate: float, seconds: int) -> list[Any]:
        """The failure-free output: the same input, published whole, through the same fragment
        on this host's Spark, read until no batch is left."""
        gen = generator(seed, rate)
        server = StreamServer()
        self._references += 1
        name = f"reference-{self._references}"
        try:
            server.log.declare(INPUT_STREAM, BUCKET_S)
            server.log.declare("out", BUCKET_S)
            with StreamClient(server.location) as client:
                publish(client, INPUT_STREAM, gen.seconds(0, seconds), BUCKET_S)
            spec = spec_of(
                {
                    **plan,
                    "name": name,
                    "consumer": None,
                    # One batch for all the input: the output is the same (SUnion releases
                    # buckets in stime order, so no row is late), and it is quicker.
                    "max_buckets": 0,
                    "input": [server.location, INPUT_STREAM],
                    "output": [server.location, "out"],
                }
            )
            self.runtime.start(spec, epoch=0, replay_from=first_bucket(gen)).processAllAvailable()
            self.runtime.discard(name)
            return [list(row) for row in output_rows(server.log.table("out"))]
        finally:
            server.shutdown()

    def close(self) -> None:
        self.runtime.close()
        self.spark.stop()
        self.heartbeat.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", choices=("source", "host"))
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--name", default="A")
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--rate", type=float, default=40.0)
    args = parser.parse_args(argv)
    worker: Source | SparkHost
    ready: dict[str, Any] = {"pid": os.getpid()}
    if args.role == "source":
        worker = Source(generator(args.seed, args.rate))
        ready["location"] = worker.server.location
    else:
        worker = SparkHost(args.name, args.root or Path(f"/tmp/spark-host-{args.name}"))
        ready["location"] = worker.runtime.location
        # Where peers send heartbeats: the responder, not this process (spark_jobs.ha.heartbeat).
        ready["heartbeat"] = worker.heartbeat.location
        ready["heartbeat_pid"] = worker.heartbeat.proc.pid
    control = ActionServer(worker.handlers())
    signal.signal(signal.SIGTERM, lambda *_: worker.stopped.set())
    ready["control"] = control.location
    _write_ready(args.ready, ready)
    worker.stopped.wait()
    # Answer the shutdown call before the server goes.
    time.sleep(0.1)
    control.shutdown()
    if isinstance(worker, SparkHost):
        worker.close()
    else:
        worker.server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
