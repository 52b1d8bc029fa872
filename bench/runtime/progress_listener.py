"""CPU per micro-batch of watching a streaming query's progress the way PySpark offers it (its
listener wrapper, and ``recentProgress`` polled) against ``spark_jobs.runtime.listeners`` (the
progress as JSON, a book the listener fills), interleaved in one Spark session.

What an agent does for each DPC copy: one listener for the session, and a poll five times a
second that reads the last ten reports (``DPCFragment.adapt_budget``). The workload is a rate
source into a no-op sink at a 200 ms trigger, so the batches themselves are cheap and the
watching is what differs. CPU is the JVM's (``/proc/<pid>/stat``) plus this process's own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener
from rich.progress import Progress

from spark_jobs.runtime.listeners import ProgressBook, ProgressListener

POLL_EVERY_S = 0.2  # spark_jobs.runtime.active.POLL_EVERY_S


class PySparkWay(StreamingQueryListener):
    """PySpark's own conversion; the poll asks the query."""

    def __init__(self) -> None:
        self.batches = 0

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryProgress(self, event: Any) -> None:
        self.batches += 1

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        return None

    def recent(self, query: Any) -> list[Any]:
        return list(query.recentProgress[-10:])


class BookWay(ProgressListener):
    def __init__(self) -> None:
        self.batches = 0
        self.book = ProgressBook()
        # The run the bench started (set once its query is up).
        self.run_id = ""

    def onQueryProgress(self, event: Any) -> None:
        self.batches += 1
        self.book.record(event.progress)

    def recent(self, query: Any) -> list[Any]:
        return self.book.recent(self.run_id, last=10)


def _jvm_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def one_run(spark: SparkSession, jvm_pid: int, way: str, seconds: float, root: Path) -> dict:
    listener: PySparkWay | BookWay = PySparkWay() if way == "pyspark" else BookWay()
    spark.streams.addListener(listener)
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(root / f"{way}-{time.time_ns()}"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    if isinstance(listener, BookWay):
        listener.run_id = str(query.runId)
    stop = threading.Event()
    polls = 0

    def poll() -> None:
        nonlocal polls
        while not stop.wait(POLL_EVERY_S):
            listener.recent(query)
            polls += 1

    # Measured once recentProgress is full (100 reports at five batches a second), as in a copy
    # that has run for a while.
    time.sleep(25)
    poller = threading.Thread(target=poll, daemon=True)
    jvm0, own0, batches0 = _jvm_cpu_s(jvm_pid), _own_cpu_s(), listener.batches
    poller.start()
    time.sleep(seconds)
    stop.set()
    poller.join()
    jvm, own, batches = (
        _jvm_cpu_s(jvm_pid) - jvm0,
        _own_cpu_s() - own0,
        listener.batches - batches0,
    )
    query.stop()
    spark.streams.removeListener(listener)
    return {
        "way": way,
        "batches": batches,
        "polls": polls,
        "jvm_cpu_s": jvm,
        "python_cpu_s": own,
        "cpu_ms_per_batch": 1000 * (jvm + own) / max(batches, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from spark_jobs.session import build_session

    spark = build_session(app_name="bench-progress", master="local[2]", shuffle_partitions=2)
    jvm_pid = int(spark._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    runs: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="progress-bench-") as tmp, Progress() as bar:
            task = bar.add_task("pairs", total=args.pairs * 2)
            for pair in range(args.pairs):
                # Alternate which goes first: the JIT warms up over the run.
                order = ["pyspark", "book"] if pair % 2 == 0 else ["book", "pyspark"]
                for way in order:
                    runs.append(one_run(spark, jvm_pid, way, args.seconds, Path(tmp)))
                    bar.advance(task)
    finally:
        spark.stop()
    per_batch = {
        way: statistics.median(r["cpu_ms_per_batch"] for r in runs if r["way"] == way)
        for way in ("pyspark", "book")
    }
    result = {
        "pairs": args.pairs,
        "seconds_each": args.seconds,
        "runs": runs,
        "cpu_ms_per_batch": per_batch,
        "ratio_book_to_pyspark": per_batch["book"] / per_batch["pyspark"],
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
