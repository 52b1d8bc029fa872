"""A participant's SQL over its own JSON files into Parquet: fedload's source, fragment and sink
against the same query on Spark's own file source and file sink, same input, same session.

python -m bench.own_work.sql_files [--files N --rows M --repeats K] [--json FILE]

- **Input**: N JSON-lines files of M readings each (``station STRING, ts TIMESTAMP, temp
  DOUBLE``), generated from a seed; file i holds event times [i*10 s, (i+1)*10 s) after a fixed
  start, so neither arm has a late row. The last file also holds two rows of a ``~end`` station
  1.5 s and 3 s after the data: they move both arms' watermarks past the last window (a stream
  emits a window only once a later event shows it is complete), and their own window never
  closes, so neither arm reports it.
- **Query**: ``SELECT window(ts, '10 seconds') AS w, station, avg(temp) AS mean_temp, count(*)
  AS n FROM readings GROUP BY window(ts, '10 seconds'), station`` with a 0 s watermark on ts.
- **Baseline**: ``spark.readStream.schema(ddl).option("maxFilesPerTrigger", k).json(dir)`` ->
  ``withWatermark`` -> the SQL over a temp view -> ``writeStream.format("parquet")`` (append,
  checkpointed), processing-time trigger ``--trigger``.
- **fedload**: what an agent runs for a ``files`` source, a SQL task and a ``parquet`` sink, all
  at one owner: ``FileSource`` (Spark's file source, same ``maxFilesPerTrigger``, same trigger)
  into the source task's log on a ``StreamServer``; a ``FragmentRuntime`` running the SQL
  (``sql_fragment``) as SUnion -> SQL -> SOutput into the owner's output log (the agent's batch
  bound: 20 one-second buckets); ``SinkWriter`` + ``ParquetSink`` following that log.

Each run starts its queries on an empty directory, waits until they idle, then hard-links all N
files into it at once (t0) and waits until the Parquet output holds every expected row (t1):

- **throughput**: input rows / (t1 - t0), through everything in between;
- **per-batch latency**: median and p95 of ``durationMs.triggerExecution`` of the batches that
  read rows (fedload: the source query's and the fragment query's, and their sum: a batch of
  files crosses both);
- **CPU per row**: CPU time from t0 to t1 of this process's whole tree (``/proc``: utime +
  stime, and cutime + cstime of children that ended), divided by input rows: the driver's
  Python (which also runs the files source's ``foreachBatch``, the Flight logs and the sink
  writer), Spark's JVM, and every other process below them: the Python workers Spark starts
  (SUnion's planner and readers) and the short-lived commands the JVM spawns (Hadoop's local
  file system, without its native library, runs ``readlink``/``stat`` through
  ``jspawnhelper`` for checkpoint and output files: dozens per run in either arm).

The arms alternate (baseline first, then fedload first, ...) after one unmeasured warm-up run
of each on the same input; ratios are fedload / baseline per pair, medians over the pairs. Both
arms' Parquet outputs must hold the same rows, and the generator's own count of (window,
station) groups and rows, or the run fails: a comparison of wrong results measures nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.work.spec import Work
from bench.own_work.measure import (
    POLL_S,
    RowCounter,
    RunResult,
    batches_of,
    cpu_delta,
    cpu_sample,
    in_run,
    output_rows,
    pair_figures,
    parquet_parts,
    spark_sink_files,
    summary,
    wait_for_rows,
)
from spark_jobs.fragments.sql import FragmentInput, local_name, merged_schema, sql_fragment
from spark_jobs.runtime import FragmentRuntime, FragmentSpec, StreamRef, StreamServer
from spark_jobs.sinks.writer import Chunk, Sink, SinkWriter, build_sink
from spark_jobs.sinks.writer import Progress as SinkProgress
from spark_jobs.sources import SourceContext
from spark_jobs.sources.files import FileSource

DDL = "station STRING, ts TIMESTAMP, temp DOUBLE"
SQL = (
    "SELECT window(ts, '10 seconds') AS w, station, avg(temp) AS mean_temp, count(*) AS n "
    "FROM readings GROUP BY window(ts, '10 seconds'), station"
)
WATERMARK = "0 seconds"
WINDOW_SECONDS = 10
# One file per window: each file closes one window of every station.
FILE_SECONDS = WINDOW_SECONDS
BUCKET_SECONDS = 1.0  # the federation's default
# An agent bounds a fragment's batch at 20 s of input (participant_host.BATCH_SECONDS).
MAX_BUCKETS_PER_BATCH = 20
START = datetime(2026, 3, 1, tzinfo=UTC)
FIRST_BUCKET = int(START.timestamp() // BUCKET_SECONDS)
END_STATION = "~end"
SOURCE_TASK, FRAGMENT_TASK = "O.readings", "O.mean"
# Long enough for a query to start and settle into idle triggers on the empty directory.
SETTLE_S = 2.0


@dataclass(frozen=True)
class Dataset:
    directory: Path
    files: tuple[Path, ...]
    rows: int  # input rows, the two end rows included
    groups: int  # (window, station) rows both outputs must hold
    counted: int  # the sum of their n: every data row


def generate(directory: Path, files: int, rows: int, stations: int, seed: int) -> Dataset:
    """``files`` JSON-lines files of ``rows`` readings, file i over [i*10 s, (i+1)*10 s).
    Temperatures are multiples of 0.25, so every sum is exact and both arms' averages are the
    same double whatever order their partitions add in."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    names = [f"s{n:03d}" for n in range(stations)]
    groups: set[tuple[int, str]] = set()
    paths = []
    # Spark's file source takes the oldest files first: mtimes in file order.
    mtime = time.time() - files - 60
    for index in range(files):
        path = directory / f"readings-{index:05d}.json"
        lines = []
        for _ in range(rows):
            offset_ms = index * FILE_SECONDS * 1000 + rng.randrange(FILE_SECONDS * 1000)
            station = rng.choice(names)
            groups.add((offset_ms // (WINDOW_SECONDS * 1000), station))
            temp = rng.randrange(-40, 160) / 4
            lines.append(_line(station, offset_ms, temp))
        if index == files - 1:
            end_ms = files * FILE_SECONDS * 1000
            lines += [
                _line(END_STATION, end_ms + 1500, 0.0),
                _line(END_STATION, end_ms + 3000, 0.0),
            ]
        path.write_text("".join(lines))
        os.utime(path, (mtime + index, mtime + index))
        paths.append(path)
    return Dataset(directory, tuple(paths), files * rows + 2, len(groups), files * rows)


def _line(station: str, offset_ms: int, temp: float) -> str:
    stamp = (START + timedelta(milliseconds=offset_ms)).isoformat(timespec="milliseconds")
    return json.dumps({"station": station, "ts": stamp.replace("+00:00", "Z"), "temp": temp}) + "\n"


def feed(data: Dataset, watched: Path) -> None:
    """All files at once, as hard links (same mtimes, so the same order for Spark)."""
    for path in data.files:
        os.link(path, watched / path.name)


# -- CPU of this process tree ------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    trigger_s: float
    max_files: int
    timeout_s: float


def run_baseline(
    spark: SparkSession, jvm: int, data: Dataset, root: Path, s: Settings
) -> RunResult:
    watched, out = root / "in", root / "out"
    watched.mkdir(parents=True)
    frame = (
        spark.readStream.schema(DDL).option("maxFilesPerTrigger", s.max_files).json(str(watched))
    )
    view = f"readings_{root.name.replace('-', '_')}"
    frame.withWatermark("ts", WATERMARK).createOrReplaceTempView(view)
    try:
        result = spark.sql(SQL.replace("FROM readings", f"FROM {view}"))
    finally:
        spark.catalog.dropTempView(view)
    query = (
        result.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out))
        .option("checkpointLocation", str(root / "checkpoint"))
        .queryName(f"baseline-{root.name}")
        .trigger(processingTime=f"{round(s.trigger_s * 1000)} milliseconds")
        .start()
    )
    try:
        time.sleep(SETTLE_S)
        counter = RowCounter()
        before, t0 = cpu_sample(jvm), time.time()
        feed(data, watched)
        t1 = wait_for_rows(
            lambda: counter.count(spark_sink_files(out)),
            data.groups,
            lambda: None if query.isActive else f"baseline stopped: {query.exception()}",
            s.timeout_s,
        )
        cpu = cpu_delta(before, cpu_sample(jvm))
        batches = in_run(batches_of(query), t0, t1)
    finally:
        query.stop()
    last = max((b["end"] for b in batches), default=t1)
    return RunResult(
        "baseline",
        data.rows,
        t1 - t0,
        cpu,
        {"baseline": batches},
        {"last batch": last - t0, "parquet": t1 - t0},
        output=output_rows(spark_sink_files(out)),
    )


class TimedSink:
    """``ParquetSink`` as the writer uses it, noting when each write ends."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.writes: list[float] = []

    def plan(self, lo: int, hi: int) -> tuple[int, int]:
        return self.inner.plan(lo, hi)

    def write(self, chunk: Chunk) -> None:
        self.inner.write(chunk)
        self.writes.append(time.time())

    def close(self) -> None:
        self.inner.close()


def run_fedload(spark: SparkSession, jvm: int, data: Dataset, root: Path, s: Settings) -> RunResult:
    watched, out = root / "in", root / "out"
    watched.mkdir(parents=True)
    # The two tasks as the registry stores them (an agent builds its runners from these).
    source = Work.from_json(
        {
            "source": {
                "kind": "files",
                "format": "json",
                "path": str(watched),
                "schema": DDL,
                "event_time": "ts",
                "max_files_per_trigger": s.max_files,
            }
        }
    ).source
    task = Work.from_json(
        {"sql": SQL, "watermark": WATERMARK, "sink": {"kind": "parquet", "path": str(out)}}
    )
    assert source is not None and task.sql is not None and task.sink is not None
    source_stream, output_stream = f"{SOURCE_TASK}.out", f"{FRAGMENT_TASK}.out"
    server = StreamServer()
    server.log.declare(source_stream, BUCKET_SECONDS)
    server.log.declare(output_stream, BUCKET_SECONDS)
    runtime = FragmentRuntime("O", spark, root / "checkpoints", server=server)
    files = FileSource(
        source,
        SourceContext(
            SOURCE_TASK,
            source_stream,
            server.location,
            BUCKET_SECONDS,
            root / "sources" / SOURCE_TASK,
            spark=lambda: spark,
        ),
        trigger_seconds=s.trigger_s,
    )
    source_thread = threading.Thread(target=files.run, name="bench-files", daemon=True)
    inputs = [FragmentInput(local_name(SOURCE_TASK), source.schema.ddl(), source.event_time)]
    spec = FragmentSpec(
        name=FRAGMENT_TASK,
        build=sql_fragment(task.sql, inputs, task.watermark),
        input_schema=merged_schema(inputs),
        inputs=(StreamRef(server.location, source_stream),),
        output=StreamRef(server.location, output_stream),
        bucket_seconds=BUCKET_SECONDS,
        trigger_seconds=s.trigger_s,
        max_buckets_per_batch=MAX_BUCKETS_PER_BATCH,
    )
    sink = TimedSink(build_sink(FRAGMENT_TASK, task.sink, root))
    writer = SinkWriter(
        server.log,
        FRAGMENT_TASK,
        output_stream,
        sink,
        SinkProgress(root / "sinks" / f"{FRAGMENT_TASK}.json", task.sink.to_json()),
    )
    fragment: Any = None
    try:
        source_thread.start()
        # From the data's first bucket: started on a log with no row and no boundary yet,
        # SUnion would begin at bucket 0 and walk to 2026 twenty empty buckets per batch
        # (its initial offset, with the agent's batch bound), so the run would never end.
        fragment = runtime.start(spec, epoch=0, replay_from=FIRST_BUCKET)
        writer.start()
        deadline = time.monotonic() + s.timeout_s
        while files.query is None and files.error is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        time.sleep(SETTLE_S)

        def alive() -> str | None:
            if files.error is not None:
                return files.error
            if not fragment.isActive:
                return f"fragment stopped: {fragment.exception()}"
            return None

        counter = RowCounter()
        before, t0 = cpu_sample(jvm), time.time()
        feed(data, watched)
        t1 = wait_for_rows(
            lambda: counter.count(parquet_parts(out)), data.groups, alive, s.timeout_s
        )
        cpu = cpu_delta(before, cpu_sample(jvm))
        source_batches = in_run(batches_of(files.query), t0, t1)
        fragment_batches = in_run(batches_of(fragment), t0, t1)
        checks = {
            "malformed": files.malformed,
            "late": files.log.late if files.log is not None else None,
            "sink error": writer.error,
            "boundary errors": runtime._boundaries.errors,
        }
        if files.malformed or (files.log is not None and files.log.late) or writer.error:
            raise AssertionError(f"fedload's run was not clean: {checks}")
    finally:
        writer.stop()
        if fragment is not None:
            runtime.stop(FRAGMENT_TASK)
        files.stop()
        source_thread.join(60)
        runtime.close()
    timeline = {
        "source last batch": max((b["end"] for b in source_batches), default=t0) - t0,
        "fragment last batch": max((b["end"] for b in fragment_batches), default=t0) - t0,
        "parquet": t1 - t0,
    }
    return RunResult(
        "fedload",
        data.rows,
        t1 - t0,
        cpu,
        {"source": source_batches, "fragment": fragment_batches},
        timeline,
        sink_writes=len(sink.writes),
        output=output_rows(parquet_parts(out)),
    )


ARMS: dict[str, Callable[[SparkSession, int, Dataset, Path, Settings], RunResult]] = {
    "baseline": run_baseline,
    "fedload": run_fedload,
}


def check(result: RunResult, data: Dataset, reference: list[tuple[Any, ...]] | None) -> None:
    """The output holds every (window, station) group and every row, and equals the other's."""
    got = result.output
    if len(got) != data.groups or sum(r[4] for r in got) != data.counted:
        raise AssertionError(
            f"{result.arm}: {len(got)} groups and {sum(r[4] for r in got)} rows counted, "
            f"the generator made {data.groups} groups of {data.counted} rows"
        )
    if any(r[2] == END_STATION for r in got):
        raise AssertionError(f"{result.arm} reported the end rows' window")
    if reference is not None and got != reference:
        differ = sum(a != b for a, b in zip(got, reference, strict=True))
        raise AssertionError(
            f"{result.arm}'s Parquet differs from the other arm's in {differ} rows"
        )


# -- Figures ---------------------------------------------------------------------------------


def _cpu_text(cpu: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if isinstance(v, float))


def print_report(console: Console, result: dict[str, Any]) -> None:
    s = result["summary"]
    r, b, f = s["ratios_median"], s["baseline"], s["fedload"]
    table = Table(title="fedload / Spark's file source + file sink (medians over pairs)")
    for column in ("", "fedload", "baseline", "ratio", "target"):
        table.add_column(column)
    table.add_row(
        "batch latency median (source + fragment)",
        f"{f['path_median_ms']:.0f} ms ({f['source_batch_median_ms']:.0f} + "
        f"{f['fragment_batch_median_ms']:.0f})",
        f"{b['batch_median_ms']:.0f} ms",
        f"{r['batch_median_path']:.2f}",
        "<= 1.2",
    )
    table.add_row(
        "batch latency p95 (source + fragment)",
        f"{f['path_p95_ms']:.0f} ms",
        f"{b['batch_p95_ms']:.0f} ms",
        f"{r['batch_p95_path']:.2f}",
        "<= 1.2",
    )
    table.add_row(
        "fragment query alone, median",
        f"{f['fragment_batch_median_ms']:.0f} ms",
        f"{b['batch_median_ms']:.0f} ms",
        f"{r['batch_median_fragment']:.2f}",
        "",
    )
    table.add_row(
        "end to end time (first file -> all Parquet)",
        f"{f['seconds']:.2f} s",
        f"{b['seconds']:.2f} s",
        f"{r['end_to_end_time']:.2f}",
        "<= 1.2",
    )
    table.add_row(
        "throughput",
        f"{f['rows_per_s']:,.0f} rows/s",
        f"{b['rows_per_s']:,.0f} rows/s",
        f"{r['throughput']:.2f}",
        ">= 0.83",
    )
    table.add_row(
        "CPU per input row (process tree)",
        f"{f['cpu_us_per_row']:.1f} us",
        f"{b['cpu_us_per_row']:.1f} us",
        f"{r['cpu_per_row']:.2f}",
        "<= 1.2",
    )
    console.print(table)
    for index, pair in enumerate(result["pairs"]):
        fed, base = pair["fedload"], pair["baseline"]
        console.print(
            f"pair {index}: time {pair['ratios']['end_to_end_time']:.2f}, "
            f"batch {pair['ratios']['batch_median_path']:.2f}, "
            f"cpu/row {pair['ratios']['cpu_per_row']:.2f}; fedload timeline "
            + ", ".join(f"{k} {v:.2f} s" for k, v in fed["timeline_s"].items())
            + f"; baseline done {base['seconds']:.2f} s; CPU fedload "
            + _cpu_text(fed["cpu"])
            + " / baseline "
            + _cpu_text(base["cpu"])
        )


# -- Main ------------------------------------------------------------------------------------


@contextmanager
def scratch(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    directory = Path(tempfile.mkdtemp(prefix="bench-own-work-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=24, help="JSON-lines files (10 s each)")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per file")
    parser.add_argument("--stations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="measured pairs of runs")
    parser.add_argument("--max-files-per-trigger", type=int, default=2)
    parser.add_argument("--trigger", type=float, default=0.5, help="seconds, every query")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workdir", type=Path, help="keep the data and outputs here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    console = Console()
    settings = Settings(args.trigger, args.max_files_per_trigger, args.timeout)
    load_before = os.getloadavg()
    started = datetime.now(UTC)
    pairs: list[dict[str, Any]] = []
    from spark_jobs.session import build_session

    with (
        scratch(args.workdir) as work,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
        ) as bar,
    ):
        steps = bar.add_task("generating input", total=3 + 2 * args.repeats)
        data = generate(work / "data", args.files, args.rows, args.stations, args.seed)
        bar.update(steps, advance=1, description="starting Spark")
        spark = build_session(app_name="bench-own-work", master="local[2]", shuffle_partitions=2)
        jvm = int(spark._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
        try:
            # A first run of each arm on the same input, not counted: the JVM's JIT compiles
            # the paths both share (JSON parsing, aggregation) in whichever runs first, and a
            # small warm-up left the first measured run with nearly twice the JVM's CPU.
            bar.update(steps, advance=1, description="warm-up (each arm once, not counted)")
            for arm, run in ARMS.items():
                check(run(spark, jvm, data, work / f"warm-{arm}", settings), data, None)
            bar.update(steps, advance=1)
            for repeat in range(args.repeats):
                order = list(ARMS) if repeat % 2 == 0 else list(reversed(ARMS))
                results: dict[str, RunResult] = {}
                for arm in order:
                    bar.update(steps, description=f"pair {repeat}: {arm}")
                    results[arm] = ARMS[arm](spark, jvm, data, work / f"{arm}-{repeat}", settings)
                    bar.update(steps, advance=1)
                check(results["baseline"], data, None)
                check(results["fedload"], data, results["baseline"].output)
                pairs.append(pair_figures(results["baseline"], results["fedload"]))
        finally:
            spark.stop()
    result = {
        "command": " ".join(["python -m bench.own_work.sql_files", *(argv or sys.argv[1:])]),
        "date": started.isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
        "settings": {**asdict(settings), **vars(args), "json": None, "workdir": None},
        "input": {"rows": data.rows, "files": len(data.files), "groups": data.groups},
        "sql": SQL,
        "watermark": WATERMARK,
        "pairs": pairs,
        "summary": summary(pairs),
    }
    print_report(console, result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


if __name__ == "__main__":
    main()
