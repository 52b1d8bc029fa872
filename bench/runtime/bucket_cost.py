"""Per-bucket cost of a SUnion fragment: the same input at 1 s and at 0.1 s buckets.

python -m bench.runtime.bucket_cost [--rate 300] [--seconds 24] [--batch-seconds 4]
                                     [--modes plain,dpc] [--small-batch-buckets 4]
                                     [--json FILE] [--no-profile]

One process, real Flight logs (three producers, one home), one local Spark session. The
stateful ports fragment (distinct ports per source, 4 s windows) reads three inputs of
``--rate`` rows/s each. The whole input (``--seconds``) is published before the query starts, so
the query catches up over a backlog with a batch cap of ``--batch-seconds`` of input
(``max_buckets_per_batch`` = batch seconds / bucket width): both widths see the same rows in the
same number of batches, and only the number of buckets per batch differs (4 vs 40 by default).

Per batch with rows it records Spark's ``durationMs`` breakdown and the buckets read; per width,
each phase's milliseconds per second of input; and the ratio 0.1 s / 1 s per phase. One more
run per mode keeps the 0.1 s buckets but caps batches at ``--small-batch-buckets`` (0.4 s of
input): the cost of a batch as such, apart from its buckets.

Modes: ``plain`` is a bare ``FragmentRuntime.start`` (stable path, no spool); ``dpc`` is the same
fragment as a ``DPCFragment`` (delay budget, spool, wall clock; the backlog is complete, so every
bucket is released stable), which is how the federation runs copies.

Profiles: the reader's methods run in Python processes Spark starts (``latestOffset`` beside the
driver, ``read`` in executor workers), out of reach of a profiler in this process. So the same
reader, with the options the run gave it, is driven directly over the same backlog and batch
ranges under cProfile (``latestOffset`` + ``partitions``, then every partition's ``read``); the
JSON keeps the top functions per width.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import functools
import io
import json
import os
import platform
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from spark_jobs.fragments import CONNECTION_SCHEMA, distinct_port_counts
from spark_jobs.generators import ConnectionGenerator, RateSchedule
from spark_jobs.runtime import (
    FragmentRuntime,
    FragmentSpec,
    StreamClient,
    StreamRef,
    StreamServer,
    publish,
)
from spark_jobs.runtime.dpc import DPCFragment, DPCSettings
from spark_jobs.runtime.sunion import SUnionReader
from spark_jobs.session import build_session

PHASES = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "walCommit",
    "commitOffsets",
    "triggerExecution",
)
WIDTHS = (1.0, 0.1)
INPUTS = 3


def _generators(rate: int) -> list[ConnectionGenerator]:
    return [
        ConnectionGenerator(seed=21 + n, schedule=RateSchedule.constant(rate), scan_rate=4)
        for n in range(INPUTS)
    ]


def _offset(raw: Any) -> int | None:
    if raw is None:
        return None
    value = json.loads(raw) if isinstance(raw, str) else raw
    return int(value["bucket"]) if isinstance(value, dict) and "bucket" in value else None


def _batches(progress: list[Any], first: int) -> list[dict[str, Any]]:
    """Batches that read buckets: their durations and bucket count. The first batch has no
    start offset in Spark's progress: it starts at the reader's initial offset, ``first``."""
    out = []
    for p in progress:
        source = p.sources[0]
        lo, hi = _offset(source.startOffset), _offset(source.endOffset)
        lo = first if lo is None else lo
        if hi is None or lo == hi:
            continue
        buckets = hi - lo
        out.append(
            {
                "batch": p.batchId,
                "rows": p.numInputRows,
                "start": lo,
                "end": hi,
                "buckets": buckets,
                "durationMs": {k: int(p.durationMs.get(k, 0)) for k in PHASES},
            }
        )
    return out


@dataclasses.dataclass
class Setup:
    """Producers with the backlog published, a home log, and the fragment's spec."""

    producers: list[StreamServer]
    home: StreamServer
    spec: FragmentSpec
    rows: int
    # The oldest bucket the inputs hold: a fresh query's initial offset.
    first: int

    def close(self) -> None:
        for server in [*self.producers, self.home]:
            server.shutdown()


def _setup(width: float, args: argparse.Namespace, tag: str, per_batch: int | None = None) -> Setup:
    producers = [StreamServer() for _ in range(INPUTS)]
    home = StreamServer()
    rows = 0
    firsts = []
    for n, (server, generator) in enumerate(zip(producers, _generators(args.rate), strict=True)):
        with StreamClient(server.location) as client:
            client.declare(f"in{n}", width)
            table = generator.seconds(0, args.seconds)
            rows += table.num_rows
            publish(client, f"in{n}", table, width)
            firsts.append(int(client.info(f"in{n}")["first"]))
    with StreamClient(home.location) as client:
        client.declare("out", width)
    per_batch = per_batch or round(args.batch_seconds / width)
    spec = FragmentSpec(
        name=f"ports-{tag}",
        build=functools.partial(distinct_port_counts, window_seconds=4, threshold=3),
        input_schema=CONNECTION_SCHEMA,
        inputs=tuple(StreamRef(s.location, f"in{n}") for n, s in enumerate(producers)),
        output=StreamRef(home.location, "out"),
        bucket_seconds=width,
        trigger_seconds=0.1,
        max_buckets_per_batch=per_batch,
    )
    return Setup(producers, home, spec, rows, min(firsts))


def _settings() -> DPCSettings:
    # Wall clock; X far above any batch, so the backlog (complete in every input) goes stable.
    return DPCSettings(max_delay_seconds=3600.0)


def run_query(
    spark: SparkSession,
    root: Path,
    width: float,
    mode: str,
    args: argparse.Namespace,
    tag: str,
    per_batch: int | None = None,
) -> dict[str, Any]:
    setup = _setup(width, args, tag, per_batch)
    runtime = FragmentRuntime(f"H-{tag}", spark, root / tag)
    try:
        began = time.perf_counter()
        if mode == "dpc":
            node = DPCFragment(runtime, setup.spec, _settings(), epoch=0)
            query = node.start()
        else:
            query = runtime.start(setup.spec, epoch=0)
        query.processAllAvailable()
        wall = time.perf_counter() - began
        batches = _batches(list(query.recentProgress), setup.first)
        runtime.stop(setup.spec.name)
        out_rows = setup.home.log.table("out").num_rows
    finally:
        runtime.close()
        setup.close()
    seconds = sum(b["buckets"] for b in batches) * width
    per_second = {
        phase: sum(b["durationMs"][phase] for b in batches) / seconds if seconds else None
        for phase in PHASES
    }
    return {
        "mode": mode,
        "bucket_seconds": width,
        "max_buckets_per_batch": setup.spec.max_buckets_per_batch,
        "input_rows": setup.rows,
        "output_rows": out_rows,
        "wall_s": round(wall, 2),
        "input_seconds": seconds,
        "batches": batches,
        "ms_per_input_second": per_second,
        "median_buckets": statistics.median(b["buckets"] for b in batches) if batches else None,
        "median_trigger_ms": statistics.median(b["durationMs"]["triggerExecution"] for b in batches)
        if batches
        else None,
    }


def _reader_options(setup: Setup, mode: str, width: float, spool: Path) -> dict[str, str]:
    options = {
        "inputs": json.dumps([i.source() for i in setup.spec.inputs]),
        "consumer": "profile",
        "max_buckets_per_batch": str(setup.spec.max_buckets_per_batch),
    }
    if mode == "dpc":
        options.update(_settings().source_options(width))
        options.update({"spool_dir": str(spool), "hold_healed": "false"})
    return options


def profile_reader(width: float, mode: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The reader driven directly (no Spark) over the same backlog, planning and reading under
    cProfile; no commit (no acknowledgement: nothing is trimmed)."""
    setup = _setup(width, args, f"profile-{mode}-{width}")
    try:
        reader = SUnionReader(
            _reader_options(setup, mode, width, root / f"spool-{mode}-{width}"),
            CONNECTION_SCHEMA,
        )
        plan, read = cProfile.Profile(), cProfile.Profile()
        plan_s = read_s = 0.0
        rows = buckets = 0
        start: dict[str, int] | None = None
        while True:
            t0 = time.perf_counter()
            plan.enable()
            if start is None:
                start = reader.initialOffset()
            end = reader.latestOffset(start)
            parts = reader.partitions(start, end)
            plan.disable()
            t1 = time.perf_counter()
            plan_s += t1 - t0
            if not parts:
                break
            read.enable()
            for part in parts:
                rows += sum(b.num_rows for b in reader.read(part))
            read.disable()
            read_s += time.perf_counter() - t1
            buckets += end["bucket"] - start["bucket"]
            start = end
        reader.stop()
    finally:
        setup.close()
    seconds = buckets * width
    return {
        "mode": mode,
        "bucket_seconds": width,
        "rows": rows,
        "input_seconds": seconds,
        "plan_ms_per_input_second": 1000 * plan_s / seconds,
        "read_ms_per_input_second": 1000 * read_s / seconds,
        "plan_top": _top(plan, args.profile_lines),
        "read_top": _top(read, args.profile_lines),
    }


def _top(profile: cProfile.Profile, lines: int) -> list[str]:
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.strip_dirs().sort_stats("tottime").print_stats(lines)
    body = text.getvalue().splitlines()
    header = next((n for n, line in enumerate(body) if line.lstrip().startswith("ncalls")), 0)
    return [line for line in body[header:] if line.strip()]


def ratios(fine: dict[str, Any], coarse: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for phase in PHASES:
        a, b = fine["ms_per_input_second"][phase], coarse["ms_per_input_second"][phase]
        out[phase] = round(a / b, 2) if a is not None and b else None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=300, help="rows/s per input")
    parser.add_argument("--seconds", type=int, default=24, help="seconds of input (backlog)")
    parser.add_argument("--batch-seconds", type=float, default=4.0, help="input per batch")
    parser.add_argument("--modes", default="plain,dpc")
    parser.add_argument(
        "--small-batch-buckets",
        type=int,
        default=4,
        help="also run 0.1 s buckets with this batch cap (0: not)",
    )
    parser.add_argument("--small-seconds", type=int, default=8, help="input of that run")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--profile-lines", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    spark = build_session(app_name="bucket-cost", shuffle_partitions=2)
    result: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_before": os.getloadavg(),
        "runs": [],
        "ratios": {},
        "profiles": [],
    }
    with tempfile.TemporaryDirectory(prefix="bucket-cost-") as tmp:
        root = Path(tmp)
        # Warm-up (JVM, Python workers, the state store's first use): not counted.
        warm = argparse.Namespace(**{**vars(args), "seconds": 4})
        run_query(spark, root, 1.0, "plain", warm, "warmup")
        for mode in modes:
            runs = {
                width: run_query(spark, root, width, mode, args, f"{mode}-{n}")
                for n, width in enumerate(WIDTHS)
            }
            result["runs"].extend(runs.values())
            result["ratios"][mode] = ratios(runs[0.1], runs[1.0])
            for width, run in runs.items():
                print(
                    f"{mode} {width:>4} s buckets: {len(run['batches'])} batches, "
                    f"median trigger {run['median_trigger_ms']} ms, ms per input second "
                    + ", ".join(f"{k}={v:.0f}" for k, v in run["ms_per_input_second"].items() if v)
                )
            print(f"{mode} ratio 0.1 s / 1 s per phase: {result['ratios'][mode]}")
            if args.small_batch_buckets:
                # The same 0.1 s buckets in small batches: a batch's fixed cost, against the
                # 40-bucket batches above (how a live copy that keeps up plans its batches).
                small_args = argparse.Namespace(**{**vars(args), "seconds": args.small_seconds})
                small = run_query(
                    spark, root, 0.1, mode, small_args, f"{mode}-small", args.small_batch_buckets
                )
                result["runs"].append(small)
                print(
                    f"{mode}  0.1 s buckets, {args.small_batch_buckets} per batch: "
                    f"{len(small['batches'])} batches, median trigger "
                    f"{small['median_trigger_ms']} ms, triggerExecution per input second "
                    f"{small['ms_per_input_second']['triggerExecution']:.0f} ms"
                )
        if not args.no_profile:
            for mode in modes:
                for width in WIDTHS:
                    prof = profile_reader(width, mode, args, root)
                    result["profiles"].append(prof)
                    print(
                        f"reader alone, {mode} {width} s: plan "
                        f"{prof['plan_ms_per_input_second']:.1f} ms, read "
                        f"{prof['read_ms_per_input_second']:.1f} ms per input second"
                    )
    result["load_after"] = os.getloadavg()
    spark.stop()
    text = json.dumps(result, indent=2, default=str)
    if args.json:
        args.json.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
