"""Fragment runtime benchmark: move latency and SUnion/SOutput overhead, in one run.

python -m bench.runtime.run [--rate 3000] [--seconds 20] [--moves 5] [--json FILE]

1. Move latency. Fragment (b) (distinct ports per source, exact port sets in the RocksDB state
   store) runs on host A with a long window so its state only grows. Each round: the move path
   (relocate A -> B: stop after last commit, pack, ship over Flight, verify, restore, commit,
   resume) and Spark's own stop-and-restart of the same query from the same checkpoint on the
   same host. Both are timed from the decision (move accepted / stop requested) to the first
   micro-batch completed by the new query. New input arrives while each is in flight, so that
   first batch has real rows to process. Rounds alternate direction (A -> B, B -> A).
2. Runtime overhead. The same fragment and the same input through SUnion -> SOutput vs Spark's
   built-in file source (one Parquet file per bucket, ``maxFilesPerTrigger`` = buckets per batch,
   so both see the same batches) -> memory sink. Per-batch latency is the median
   ``triggerExecution`` of batches with rows; throughput is rows over the summed batch time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from spark_jobs.fragments import CONNECTION_SCHEMA, distinct_port_counts
from spark_jobs.generators import ConnectionGenerator, RateSchedule, split_buckets
from spark_jobs.runtime import (
    FragmentRuntime,
    FragmentSpec,
    InMemoryCoordinator,
    LiveHost,
    PackedCheckpoint,
    StreamClient,
    StreamRef,
    StreamServer,
    publish,
    relocate,
)
from spark_jobs.session import build_session

BUCKET = 1.0


def first_batch_after(query: StreamingQuery, last_batch: int, timeout: float = 120.0) -> float:
    """Wall time at which ``query`` reports a completed batch newer than ``last_batch``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] > last_batch:
            return time.perf_counter()
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        time.sleep(0.002)
    raise TimeoutError("no batch completed at the new host")


@dataclass
class Feed:
    """Publishes the generator's next seconds to the source log, on demand."""

    client: StreamClient
    stream: str
    generator: ConnectionGenerator
    next_second: int = 0

    def push(self, seconds: int) -> int:
        table = self.generator.seconds(self.next_second, self.next_second + seconds)
        self.next_second += seconds
        publish(self.client, self.stream, table, BUCKET)
        return table.num_rows


@dataclass
class FeedingLiveHost(LiveHost):
    """The source host of a move; input keeps arriving while the move is in flight."""

    feed: Feed | None = None
    seconds: int = 1

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        packed = super().release(fragment)
        assert self.feed is not None
        self.feed.push(self.seconds)
        return packed


def _last_batch(query: StreamingQuery) -> int:
    progress = query.lastProgress
    if progress is None:
        raise RuntimeError("the query has not run a batch yet")
    return int(progress["batchId"])


def state_rows(query: StreamingQuery) -> int:
    progress: Any = query.lastProgress or {}
    return sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators", []))


def bench_moves(spark: SparkSession, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    source, home = StreamServer(), StreamServer()
    a = FragmentRuntime("A", spark, root / "A")
    b = FragmentRuntime("B", spark, root / "B")
    try:
        client = StreamClient(source.location)
        client.declare("conns", BUCKET)
        StreamClient(home.location).declare("out", BUCKET)
        generator = ConnectionGenerator(
            seed=5,
            schedule=RateSchedule.constant(args.rate),
            sources=100_000,
            zipf_exponent=1.05,
            scanners=5,
            scan_rate=50,
        )
        feed = Feed(client, "conns", generator)
        spec = FragmentSpec(
            name="ports",
            # A window longer than the run: state only grows, nothing is evicted mid-benchmark.
            build=functools.partial(distinct_port_counts, window_seconds=3600, threshold=10),
            input_schema=CONNECTION_SCHEMA,
            inputs=(StreamRef(source.location, "conns"),),
            output=StreamRef(home.location, "out"),
            bucket_seconds=BUCKET,
            trigger_seconds=0.1,
            max_buckets_per_batch=5,
        )
        coordinator = InMemoryCoordinator({"ports": "A"})
        rows = feed.push(args.seconds)
        a.start(spec, epoch=0).processAllAvailable()
        hosts = {"A": a, "B": b}
        here, there = "A", "B"
        moves: list[dict[str, Any]] = []
        restarts: list[float] = []
        # Round 0 warms the JVM and the Python workers up for both paths and is not counted.
        for round_ in range(args.moves + 1):
            # Spark's own stop-and-restart of the same query, same checkpoint, same host.
            host = hosts[here]
            query = host.query("ports")
            last = _last_batch(query)
            began = time.perf_counter()
            host.stop("ports")
            feed.push(1)
            restarted = host.start(spec, epoch=coordinator.current_epoch("ports"))
            restart_latency = first_batch_after(restarted, last) - began
            restarted.processAllAvailable()

            # The move path, same query, to the other host.
            query = host.query("ports")
            last = _last_batch(query)
            state = state_rows(query)
            began = time.perf_counter()
            moved = relocate(
                spec,
                FeedingLiveHost(host, feed=feed, seconds=1),
                hosts[there],
                coordinator=coordinator,
            )
            new_query = hosts[there].query("ports")
            latency = first_batch_after(new_query, last) - began
            if round_ == 0:
                new_query.processAllAvailable()
                here, there = there, here
                continue
            restarts.append(restart_latency)
            moves.append(
                {
                    "latency_s": latency,
                    "checkpoint_bytes": moved.checkpoint_bytes,
                    "state_rows": state,
                    "steps_s": moved.timings,
                }
            )
            new_query.processAllAvailable()
            here, there = there, here
        hosts[here].stop("ports")
        move_median = statistics.median(m["latency_s"] for m in moves)
        restart_median = statistics.median(restarts)
        client.close()
        return {
            "initial_rows": rows,
            "moves": moves,
            "restarts_s": restarts,
            "move_median_s": move_median,
            "restart_median_s": restart_median,
            "ratio": move_median / restart_median,
        }
    finally:
        a.close()
        b.close()
        source.shutdown()
        home.shutdown()


def batch_stats(query: StreamingQuery) -> dict[str, float]:
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in batches]
    rows = sum(p["numInputRows"] for p in batches)
    return {
        "batches": len(batches),
        "rows": rows,
        "median_batch_s": statistics.median(durations),
        "rows_per_s": rows / sum(durations),
    }


def bench_overhead(spark: SparkSession, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    generator = ConnectionGenerator(
        seed=9, schedule=RateSchedule.constant(args.rate), sources=20_000, zipf_exponent=1.1
    )
    table = generator.seconds(0, args.overhead_seconds)
    build = functools.partial(distinct_port_counts, window_seconds=10, threshold=10)
    per_batch = 5
    runs: dict[str, list[dict[str, float]]] = {"sunion_soutput": [], "files_memory": []}
    # One Parquet file per bucket, mtimes in bucket order: the file source lists by mtime.
    files = root / "files"
    files.mkdir()
    for index, (bucket, rows) in enumerate(split_buckets(table, BUCKET)):
        path = files / f"{bucket}.parquet"
        pq.write_table(rows, path)
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    for repeat in range(args.repeats):
        # Built-in: file source -> memory sink.
        df = (
            spark.readStream.schema(CONNECTION_SCHEMA)
            .option("maxFilesPerTrigger", per_batch)
            .parquet(str(files))
        )
        query = (
            build(df)
            .writeStream.format("memory")
            .queryName(f"baseline_{repeat}")
            .outputMode("append")
            .option("checkpointLocation", str(root / f"baseline-{repeat}"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            query.processAllAvailable()
            runs["files_memory"].append(batch_stats(query))
        finally:
            query.stop()
        spark.sql(f"DROP VIEW IF EXISTS baseline_{repeat}")

        # fedload: SUnion over Flight -> SOutput over Flight.
        source, home = StreamServer(), StreamServer()
        host = FragmentRuntime("H", spark, root / f"H-{repeat}")
        try:
            with StreamClient(source.location) as client:
                client.declare("conns", BUCKET)
                publish(client, "conns", table, BUCKET)
            with StreamClient(home.location) as client:
                client.declare("out", BUCKET)
            spec = FragmentSpec(
                name="ports",
                build=build,
                input_schema=CONNECTION_SCHEMA,
                inputs=(StreamRef(source.location, "conns"),),
                output=StreamRef(home.location, "out"),
                bucket_seconds=BUCKET,
                trigger_seconds=0.0,
                max_buckets_per_batch=per_batch,
            )
            query = host.start(spec, epoch=0)
            query.processAllAvailable()
            runs["sunion_soutput"].append(batch_stats(query))
            host.stop("ports")
        finally:
            host.close()
            source.shutdown()
            home.shutdown()

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    ours_latency = median("sunion_soutput", "median_batch_s")
    base_latency = median("files_memory", "median_batch_s")
    ours_rate = median("sunion_soutput", "rows_per_s")
    base_rate = median("files_memory", "rows_per_s")
    return {
        "rows": table.num_rows,
        "runs": runs,
        "latency_ratio": ours_latency / base_latency,
        "throughput_ratio": base_rate / ours_rate,
    }


def machine() -> dict[str, Any]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    import pyspark

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "pyspark": pyspark.__version__,
        "java": java.splitlines()[0] if java else "?",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=3000.0, help="connections per second")
    parser.add_argument("--seconds", type=int, default=20, help="input before the first move")
    parser.add_argument("--moves", type=int, default=5, help="counted move/restart rounds")
    parser.add_argument("--overhead-seconds", type=int, default=40, help="input for part 2")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side in part 2")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    spark = build_session(app_name="fedload-bench-runtime", master="local[2]", shuffle_partitions=2)
    try:
        with tempfile.TemporaryDirectory(prefix="fedload-bench-") as tmp:
            root = Path(tmp)
            moves = bench_moves(spark, root, args)
            print(
                f"move latency: median {moves['move_median_s']:.3f} s vs stop-and-restart "
                f"{moves['restart_median_s']:.3f} s, ratio {moves['ratio']:.2f} (target <= 1.5)",
                flush=True,
            )
            overhead = bench_overhead(spark, root, args)
            print(
                f"overhead: per-batch latency x{overhead['latency_ratio']:.2f}, "
                f"throughput x{overhead['throughput_ratio']:.2f} (target <= 1.3)",
                flush=True,
            )
    finally:
        spark.stop()
    result = {"machine": machine(), "args": vars(args) | {"json": None}, "moves": moves}
    result["overhead"] = overhead
    print(json.dumps(result, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
