"""Where a micro-batch's ``addBatch`` goes: the Spark job the sink's ``toArrow`` runs, and the
sink's own work around it (the DPC rules, Flight appends, the persisted node state).

python -m bench.runtime.sink_share [--rate 300] [--seconds 12] [--batch-buckets 4]
                                    [--modes plain,dpc] [--json FILE]

Session 27 found a fixed ~0.8-1 s per batch, 65-75% of it in ``addBatch``, and left open how
much of that is Spark's and how much fedload's sink (``bench/runtime/README.md``). A
``foreachBatch`` sink gets a lazy DataFrame: its ``toArrow`` runs the batch's whole plan (the
read tasks, the stateful aggregation, the state store commit), so timing it inside the sink
splits ``addBatch`` in three: the Spark job (``toArrow``), the sink's own code (the rest of its
call), and what Spark does around the call (``addBatch`` minus the sink call).

One process, the set-up of ``bench.runtime.bucket_cost`` (three Flight producers at ``--rate``
rows/s, the stateful ports fragment, a backlog of ``--seconds``), 0.1 s buckets and batches of
``--batch-buckets`` buckets, so each batch is as small as a live copy's at the paper's
settings. The timers wrap ``toArrow`` and the sink's call in this process (the sink runs here,
called back by the JVM); Spark's ``addBatch`` comes from the query's progress.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark.sql.classic.dataframe as classic
from pyspark.sql import SparkSession

from bench.runtime.bucket_cost import _batches, _settings, _setup
from spark_jobs.runtime import FragmentRuntime
from spark_jobs.runtime.dpc import DPCFragment
from spark_jobs.runtime.soutput import SOutput
from spark_jobs.session import build_session

WIDTH = 0.1


class Timers:
    """Per sink call: its seconds and the seconds ``toArrow`` took inside it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, float]] = []
        self._local = threading.local()

    def wrap_sink(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._local.to_arrow = 0.0
            began = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                total = time.perf_counter() - began
                self.calls.append({"sink_s": total, "to_arrow_s": self._local.to_arrow})

        return timed

    @contextmanager
    def to_arrow_timed(self) -> Iterator[None]:
        original = classic.DataFrame.toArrow
        timers = self

        def timed(frame: classic.DataFrame) -> Any:
            began = time.perf_counter()
            try:
                return original(frame)
            finally:
                spent = time.perf_counter() - began
                timers._local.to_arrow = getattr(timers._local, "to_arrow", 0.0) + spent

        classic.DataFrame.toArrow = timed  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            classic.DataFrame.toArrow = original  # type: ignore[method-assign]


def run(spark: SparkSession, root: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    setup = _setup(WIDTH, args, mode, per_batch=args.batch_buckets)
    runtime = FragmentRuntime(f"H-{mode}", spark, root / mode)
    timers = Timers()
    try:
        with timers.to_arrow_timed():
            if mode == "dpc":
                node = DPCFragment(runtime, setup.spec, _settings(), epoch=0)
                # The serving query's foreachBatch target: the node's QuerySink.
                serving = node.sink.serving
                serving.write = timers.wrap_sink(serving.write)  # type: ignore[method-assign]
                query = node.start()
            else:
                sink = SOutput(setup.spec.output.location, setup.spec.output.stream, 0)
                sink.write = timers.wrap_sink(sink.write)  # type: ignore[method-assign]
                query = runtime.start(setup.spec, epoch=0, sink=sink)
            query.processAllAvailable()
        progress = _batches(list(query.recentProgress), setup.first)
        runtime.stop(setup.spec.name)
    finally:
        runtime.close()
        setup.close()
    # The first batches restore nothing but plan and compile: left out, as a live copy's are.
    skip = args.skip_batches
    batches = progress[skip:]
    calls = timers.calls[-len(batches) :] if batches else []
    add = [b["durationMs"]["addBatch"] / 1000 for b in batches]
    trigger = [b["durationMs"]["triggerExecution"] / 1000 for b in batches]
    to_arrow = [c["to_arrow_s"] for c in calls]
    sink_own = [c["sink_s"] - c["to_arrow_s"] for c in calls]
    around = [a - c["sink_s"] for a, c in zip(add, calls, strict=True)]

    def median_ms(values: list[float]) -> float | None:
        return round(statistics.median(values) * 1000, 1) if values else None

    def share(part: list[float]) -> float | None:
        return round(sum(part) / sum(trigger), 3) if trigger and sum(trigger) else None

    return {
        "mode": mode,
        "batches": len(batches),
        "median_ms": {
            "triggerExecution": median_ms(trigger),
            "addBatch": median_ms(add),
            "spark_job_toArrow": median_ms(to_arrow),
            "sink_own": median_ms(sink_own),
            "around_the_sink": median_ms(around),
        },
        "share_of_trigger": {
            "addBatch": share(add),
            "spark_job_toArrow": share(to_arrow),
            "sink_own": share(sink_own),
            "around_the_sink": share(around),
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=300, help="rows/s per input")
    parser.add_argument("--seconds", type=int, default=12, help="seconds of input (backlog)")
    parser.add_argument("--batch-buckets", type=int, default=4, help="0.1 s buckets per batch")
    parser.add_argument("--skip-batches", type=int, default=3, help="first batches left out")
    parser.add_argument("--modes", default="plain,dpc")
    parser.add_argument(
        "--shuffle-partitions", type=int, default=2, help="the agents' default is the session's"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    spark = build_session(app_name="sink-share", shuffle_partitions=args.shuffle_partitions)
    result: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "load_before": [round(v, 2) for v in os.getloadavg()],
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="sink-share-") as tmp:
        root = Path(tmp)
        for mode in [m for m in args.modes.split(",") if m]:
            found = run(spark, root, mode, args)
            result["runs"].append(found)
            print(json.dumps(found))
    result["load_after"] = [round(v, 2) for v in os.getloadavg()]
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
