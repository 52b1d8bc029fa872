"""What the own-work benchmark measures and how it summarises it: process-tree CPU from /proc,
the queries' batch durations, rows in a Parquet directory, and the per-pair ratios (the arms
themselves and the command are ``bench.own_work.sql_files``)."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


@dataclass(frozen=True)
class CpuSample:
    driver: float  # this process's own user + system seconds
    jvm: float  # the JVM's own
    others: float  # every other process of the tree, with what ended children had spent
    by_process: dict[str, float]  # "<pid> <name>" -> own seconds; "reaped" for ended ones

    @property
    def total(self) -> float:
        return self.driver + self.jvm + self.others


# How often a wait polls the Parquet directory.
POLL_S = 0.02
# /proc reports CPU in clock ticks.
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class RunResult:
    arm: str
    rows: int
    seconds: float
    cpu: dict[str, Any]
    queries: dict[str, list[dict[str, Any]]]  # query -> its batches between t0 and t1
    timeline_s: dict[str, float] = field(default_factory=dict)  # stage done, after t0
    sink_writes: int = 0
    output: list[tuple[Any, ...]] = field(default_factory=list, repr=False)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def cpu_us_per_row(self) -> float:
        return 1e6 * self.cpu["total_s"] / self.rows


def _stat(pid: int) -> tuple[int, str, list[int]] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    head, tail = text.rsplit(")", 1)
    name = head.split("(", 1)[1]
    fields = tail.split()
    # fields[1] = ppid; [11..14] = utime, stime, cutime, cstime (in clock ticks).
    return int(fields[1]), name, [int(f) for f in fields[11:15]]


def cpu_sample(jvm_pid: int) -> CpuSample:
    """CPU of this process, the JVM and everything below them. A child that ended and was
    waited for is in its parent's cutime/cstime, counted under ``others``."""
    stats: dict[int, tuple[int, str, list[int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    me = os.getpid()
    driver = jvm = others = 0.0
    by_process: dict[str, float] = {"reaped": 0.0}
    stack = [me]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if pid not in stats:
            continue
        utime, stime, cutime, cstime = stats[pid][2]
        own, reaped = (utime + stime) / CLOCK_TICK, (cutime + cstime) / CLOCK_TICK
        by_process[f"{pid} {stats[pid][1]}"] = own
        by_process["reaped"] += reaped
        if pid == me:
            driver += own
        elif pid == jvm_pid:
            jvm += own
        else:
            others += own
        others += reaped
    return CpuSample(driver, jvm, others, by_process)


def cpu_delta(before: CpuSample, after: CpuSample) -> dict[str, Any]:
    processes = {
        key: round(seconds - before.by_process.get(key, 0.0), 3)
        for key, seconds in after.by_process.items()
    }
    return {
        "driver_python_s": after.driver - before.driver,
        "jvm_s": after.jvm - before.jvm,
        "other_processes_s": after.others - before.others,
        "total_s": after.total - before.total,
        "by_process_s": {k: v for k, v in processes.items() if v > 0},
    }


# -- Progress of a query -------------------------------------------------------------------


def batches_of(query: Any) -> list[dict[str, Any]]:
    """Each reported batch: id, input rows, durations, and its end on the wall clock."""
    out = []
    for progress in query.recentProgress:
        body = json.loads(progress.json) if hasattr(progress, "json") else dict(progress)
        started = datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00")).timestamp()
        durations = {k: int(v) for k, v in body.get("durationMs", {}).items()}
        out.append(
            {
                "batch": int(body["batchId"]),
                "rows": int(body.get("numInputRows") or 0),
                "durations_ms": durations,
                "end": started + durations.get("triggerExecution", 0) / 1000,
            }
        )
    return out


def in_run(batches: list[dict[str, Any]], t0: float, t1: float) -> list[dict[str, Any]]:
    """The batches that ended between t0 and t1 (a small allowance for the report's clock)."""
    return [b for b in batches if t0 < b["end"] <= t1 + 0.05]


# -- Parquet outputs -------------------------------------------------------------------------


class RowCounter:
    """Rows in a set of Parquet files, reading each file's footer once."""

    def __init__(self) -> None:
        self._rows: dict[Path, int] = {}

    def count(self, paths: list[Path]) -> int:
        total = 0
        for path in paths:
            if path not in self._rows:
                try:
                    self._rows[path] = pq.read_metadata(path).num_rows
                except (OSError, pa.ArrowInvalid):
                    continue  # still being written
            total += self._rows[path]
        return total


def spark_sink_files(directory: Path) -> list[Path]:
    """The files Spark's file sink has committed (its ``_spark_metadata`` log)."""
    metadata = directory / "_spark_metadata"
    if not metadata.is_dir():
        return []
    added: dict[str, None] = {}
    for entry in sorted(metadata.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith(".crc"):
            continue
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            path = record["path"].removeprefix("file://")
            if record.get("action", "add") == "add":
                added[path] = None
            else:
                added.pop(path, None)
    return [Path(p) for p in added]


def parquet_parts(directory: Path) -> list[Path]:
    """``ParquetSink``'s files (complete: each is renamed into place)."""
    return sorted(directory.glob("part-*.parquet")) if directory.is_dir() else []


def output_rows(paths: list[Path]) -> list[tuple[Any, ...]]:
    """The outputs' rows comparably: (window start, window end, station, mean, n), sorted."""
    if not paths:
        return []
    table = pa.concat_tables([pq.read_table(p) for p in paths], promote_options="default")

    def naive(moment: datetime) -> datetime:
        return moment.replace(tzinfo=None) if moment.tzinfo is not None else moment

    return sorted(
        (naive(r["w"]["start"]), naive(r["w"]["end"]), r["station"], r["mean_temp"], r["n"])
        for r in table.to_pylist()
    )


def wait_for_rows(
    count: Callable[[], int], expected: int, alive: Callable[[], str | None], timeout: float
) -> float:
    """The wall-clock time at which ``count()`` reaches ``expected``."""
    deadline = time.monotonic() + timeout
    while True:
        got = count()
        if got >= expected:
            if got > expected:
                raise AssertionError(f"{got} output rows, {expected} expected: duplicates")
            return time.time()
        failure = alive()
        if failure is not None:
            raise RuntimeError(failure)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{got} of {expected} output rows after {timeout:g} s")
        time.sleep(POLL_S)


# -- Figures ---------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def batch_stats(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Batches that read rows: median and p95 trigger time, and the median of each phase."""
    with_rows = [b for b in batches if b["rows"] > 0]
    trigger = [b["durations_ms"].get("triggerExecution", 0) for b in with_rows]
    phases = sorted({k for b in with_rows for k in b["durations_ms"]})
    return {
        "batches_with_rows": len(with_rows),
        "batches_without": len(batches) - len(with_rows),
        "median_ms": statistics.median(trigger) if trigger else float("nan"),
        "p95_ms": _pct(trigger, 0.95),
        "phases_median_ms": {
            k: statistics.median(b["durations_ms"].get(k, 0) for b in with_rows) for k in phases
        },
        "sum_ms_all_batches": sum(b["durations_ms"].get("triggerExecution", 0) for b in batches),
    }


def pair_figures(base: RunResult, fed: RunResult) -> dict[str, Any]:
    b = batch_stats(base.queries["baseline"])
    src, frag = batch_stats(fed.queries["source"]), batch_stats(fed.queries["fragment"])
    path_median = src["median_ms"] + frag["median_ms"]
    path_p95 = src["p95_ms"] + frag["p95_ms"]
    return {
        "baseline": {
            "seconds": base.seconds,
            "rows_per_s": base.rows_per_s,
            "cpu": base.cpu,
            "cpu_us_per_row": base.cpu_us_per_row,
            "batches": b,
            "timeline_s": base.timeline_s,
        },
        "fedload": {
            "seconds": fed.seconds,
            "rows_per_s": fed.rows_per_s,
            "cpu": fed.cpu,
            "cpu_us_per_row": fed.cpu_us_per_row,
            "source_batches": src,
            "fragment_batches": frag,
            "path_median_ms": path_median,
            "path_p95_ms": path_p95,
            "timeline_s": fed.timeline_s,
            "sink_writes": fed.sink_writes,
        },
        "ratios": {
            "batch_median_path": path_median / b["median_ms"],
            "batch_p95_path": path_p95 / b["p95_ms"],
            "batch_median_fragment": frag["median_ms"] / b["median_ms"],
            "batch_p95_fragment": frag["p95_ms"] / b["p95_ms"],
            "end_to_end_time": fed.seconds / base.seconds,
            "throughput": fed.rows_per_s / base.rows_per_s,
            "cpu_per_row": fed.cpu_us_per_row / base.cpu_us_per_row,
        },
    }


def summary(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = pairs[0]["ratios"].keys()
    ratios = {k: statistics.median(p["ratios"][k] for p in pairs) for k in keys}

    def med(arm: str, *path: str) -> float:
        values = []
        for pair in pairs:
            value: Any = pair[arm]
            for key in path:
                value = value[key]
            values.append(float(value))
        return statistics.median(values)

    return {
        "ratios_median": ratios,
        "baseline": {
            "rows_per_s": med("baseline", "rows_per_s"),
            "cpu_us_per_row": med("baseline", "cpu_us_per_row"),
            "batch_median_ms": med("baseline", "batches", "median_ms"),
            "batch_p95_ms": med("baseline", "batches", "p95_ms"),
            "seconds": med("baseline", "seconds"),
        },
        "fedload": {
            "rows_per_s": med("fedload", "rows_per_s"),
            "cpu_us_per_row": med("fedload", "cpu_us_per_row"),
            "source_batch_median_ms": med("fedload", "source_batches", "median_ms"),
            "fragment_batch_median_ms": med("fedload", "fragment_batches", "median_ms"),
            "path_median_ms": med("fedload", "path_median_ms"),
            "path_p95_ms": med("fedload", "path_p95_ms"),
            "seconds": med("fedload", "seconds"),
        },
    }
