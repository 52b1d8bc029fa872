"""A files source on Spark's file stream source, into a real Flight log: JSON-lines files
written in two rounds reach the log bucket by bucket as the pandas reading of the same files
says, and a restart from the persisted checkpoint appends nothing twice."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from app.work.spec import SourceSpec, parse_ddl
from spark_jobs.runtime.transport import StreamServer
from spark_jobs.sources import SourceContext
from spark_jobs.sources.files import FileSource
from tests.integration.sources.conftest import STREAM, wait_for

SCHEMA = parse_ddl("station STRING, ts TIMESTAMP, temp DOUBLE", ["schema"])
BASE = pd.Timestamp("2026-03-01T00:00:00Z")
FIRST = int(BASE.timestamp())  # the bucket of BASE (1 s buckets count seconds since the epoch)


def write(directory: Path, name: str, rows: list[tuple[str, float, float]]) -> None:
    """(station, seconds after BASE, temperature) rows as a JSON-lines file, written whole."""
    scratch = directory.parent / f".{name}"
    with scratch.open("w") as out:
        for station, seconds, temp in rows:
            stamp = (BASE + pd.Timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
            out.write(json.dumps({"station": station, "ts": stamp, "temp": temp}) + "\n")
    scratch.rename(directory / name)  # the file source must never see half a file


def expected(directory: Path) -> pd.DataFrame:
    """pandas over the same files: every row with its bucket (1 s buckets)."""
    frames = [pd.read_json(p, lines=True) for p in sorted(directory.glob("*.json"))]
    out = pd.concat(frames, ignore_index=True)
    out["ts"] = pd.to_datetime(out["ts"], utc=True)
    out["bucket"] = out["ts"].dt.as_unit("us").astype("int64") // 1_000_000
    return out


def logged(server: StreamServer) -> list[tuple[Any, ...]]:
    table = server.log.table(STREAM)
    if table.num_columns == 0:
        return []
    frame = table.to_pandas()
    assert (frame["stime"] == frame["ts"]).all(), "stime is the declared event time"
    return rows_of(frame)


def rows_of(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    micros = frame["ts"].dt.as_unit("us").astype("int64")
    return sorted(zip(frame["station"], micros, frame["temp"], strict=True))


def start(
    spark: Any, server: StreamServer, directory: Path, state: Path, **extra: Any
) -> tuple[FileSource, threading.Thread]:
    spec = SourceSpec("files", SCHEMA, "ts", {"format": "json", "path": str(directory), **extra})
    context = SourceContext("src", STREAM, server.location, 1.0, state, spark=lambda: spark)
    source = FileSource(spec, context, trigger_seconds=0.5)
    thread = threading.Thread(target=source.run, daemon=True)
    thread.start()
    return source, thread


@pytest.mark.timeout(600)
def test_files_in_two_rounds_reach_the_log_once_each(
    spark: Any, server: StreamServer, tmp_path: Path
) -> None:
    directory = tmp_path / "in"
    directory.mkdir()
    state = tmp_path / "state"
    write(directory, "a.json", [("x", 0.2, 1.0), ("y", 1.5, 2.0), ("x", 2.7, 3.0)])
    write(directory, "b.json", [("y", 0.9, 4.0), ("z", 3.1, 5.0)])
    source, thread = start(spark, server, directory, state, max_files_per_trigger=2)
    first = expected(directory)
    boundary = int(first["bucket"].max())  # lateness 0: the latest event's bucket stays open
    closed = first[first["bucket"] < boundary]
    wait_for(lambda: len(logged(server)) == len(closed), "the first round's closed buckets")
    assert logged(server) == rows_of(closed)
    assert server.log.info(STREAM)["boundary"] == boundary

    # One file at a time: which rows are late depends on what the log had closed before.
    write(directory, "c.json", [("x", 3.5, 6.0), ("z", 6.2, 7.0), ("y", 2.2, 8.0)])  # 2.2: late
    wait_for(lambda: server.log.info(STREAM)["boundary"] == FIRST + 6, "c.json's boundary")
    write(directory, "d.json", [("y", 8.4, 9.0), ("x", 7.7, 10.0)])
    both = expected(directory)
    final = int(both["bucket"].max())
    wait_for(lambda: server.log.info(STREAM)["boundary"] == final, "the second round's boundary")
    late = both[(both["station"] == "y") & (both["temp"] == 8.0)]
    on_time = both.drop(late.index)
    wait_for(lambda: len(logged(server)) == len(on_time[on_time["bucket"] < final]), "rows")
    assert logged(server) == rows_of(on_time[on_time["bucket"] < final])
    assert source.log is not None and source.log.late == 1
    source.stop()
    thread.join(60)

    # A restart from the persisted state: the log (still up) gets nothing twice, new files once.
    again, thread = start(spark, server, directory, state, max_files_per_trigger=2)
    write(directory, "e.json", [("z", 9.3, 11.0), ("x", 12.5, 12.0)])
    everything = expected(directory).drop(late.index)
    last = FIRST + 12
    wait_for(lambda: server.log.info(STREAM)["boundary"] == last, "the third round's boundary")
    wait_for(lambda: len(logged(server)) == len(everything[everything["bucket"] < last]), "rows")
    assert logged(server) == rows_of(everything[everything["bucket"] < last])
    assert again.log is not None and again.log.late == 1, "the late count survives the restart"
    again.stop()
    thread.join(60)


def test_a_missing_directory_is_reported_and_nothing_starts(
    server: StreamServer, tmp_path: Path
) -> None:
    said: list[str] = []
    spec = SourceSpec("files", SCHEMA, "ts", {"format": "json", "path": str(tmp_path / "no")})
    context = SourceContext(
        "src",
        STREAM,
        server.location,
        1.0,
        tmp_path / "state",
        spark=lambda: pytest.fail("Spark must not start"),
        on_error=said.append,
    )
    source = FileSource(spec, context)
    source.run()
    assert said and "does not exist" in said[0] and str(tmp_path / "no") in said[0]
