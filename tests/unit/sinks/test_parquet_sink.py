"""The Parquet sink written from a real StreamServer log: it equals the log's stable rows in
its final buckets, a rewrite after a restart from an older progress file leaves the directory
equal (pandas and DuckDB), and a half-written file is never read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.participant.ports import TaskRecord
from spark_jobs.runtime.transport import StreamClient, StreamServer
from spark_jobs.sinks.parquet import ParquetSink, part_name
from spark_jobs.sinks.writer import Progress, SinkWriter, SinkWriters

TASK, STREAM = "A.q", "A.q.out"
SPEC = {"kind": "parquet", "path": "out"}


def rows(*pairs: tuple[float, str], kinds: list[str] | None = None) -> pa.Table:
    """Rows at (seconds, name); with ``kinds`` a DPC copy's kind column too."""
    columns: dict[str, pa.Array] = {
        "stime": pa.array([round(s * 1e6) for s, _ in pairs], pa.timestamp("us", tz="UTC")),
        "name": pa.array([n for _, n in pairs], pa.string()),
        "value": pa.array([float(s) for s, _ in pairs], pa.float64()),
    }
    if kinds is not None:
        columns["kind"] = pa.array(kinds, pa.string())
    return pa.table(columns)


@pytest.fixture
def server() -> Iterator[StreamServer]:
    made = StreamServer()
    made.log.declare(STREAM, 1.0)
    try:
        yield made
    finally:
        made.shutdown()


def fill(server: StreamServer) -> pa.Table:
    """Buckets 0..5 through Flight with batch ids (one batch re-written, as after a move), the
    boundary at 5: bucket 5 is still open. What the log holds then (the writer trims it)."""
    with StreamClient(server.location) as client:
        client.append(STREAM, rows((0.1, "a"), (0.5, "b"), (1.2, "c")), batch_id=0, epoch=1)
        client.append(STREAM, rows((0.1, "a"), (0.5, "b"), (1.2, "c")), batch_id=0, epoch=1)
        client.append(STREAM, rows((3.3, "d")), batch_id=1, epoch=1, boundary=3)
        client.append(STREAM, rows((4.0, "e"), (4.9, "f"), (5.5, "open")), batch_id=2, epoch=1)
        client.advance(STREAM, 5, epoch=1)
    return server.log.table(STREAM)


def final_rows(table: pa.Table, boundary: int) -> pd.DataFrame:
    micros = table.column("stime").cast(pa.int64()).to_numpy()
    return table.filter(pa.array(micros // 1_000_000 < boundary)).to_pandas()


def writer(
    server: StreamServer, tmp_path: Path, max_buckets: int = 60, poll_seconds: float = 0.2
) -> SinkWriter:
    made = SinkWriter(
        server.log,
        TASK,
        STREAM,
        ParquetSink(tmp_path / "out"),
        Progress(tmp_path / "sinks" / f"{TASK}.json", SPEC),
        max_buckets=max_buckets,
        poll_seconds=poll_seconds,
    )
    made.hold()
    return made


def drain(made: SinkWriter) -> None:
    while made.step():
        pass


def read_pandas(directory: Path) -> pd.DataFrame:
    return pd.read_parquet(directory).sort_values(["stime", "name"]).reset_index(drop=True)


def query(sql: str) -> duckdb.DuckDBPyRelation:
    relation = duckdb.sql(sql)
    assert relation is not None  # a select always has a result
    return relation


def read_duckdb(directory: Path) -> pd.DataFrame:
    found = query(f"select * from '{directory}/*.parquet' order by stime, name").df()
    return found.reset_index(drop=True)


def same(found: pd.DataFrame, expected: pd.DataFrame) -> None:
    expected = expected.sort_values(["stime", "name"]).reset_index(drop=True)
    assert list(found["name"]) == list(expected["name"])
    assert list(found["value"]) == list(expected["value"])
    assert [pd.Timestamp(t).value for t in found["stime"]] == [
        pd.Timestamp(t).value for t in expected["stime"]
    ]


def test_the_directory_is_the_logs_stable_rows_of_its_final_buckets(
    server: StreamServer, tmp_path: Path
) -> None:
    held = fill(server)
    made = writer(server, tmp_path, max_buckets=2)
    drain(made)
    expected = final_rows(held, 5)
    assert list(expected["name"]) == ["a", "b", "c", "d", "e", "f"]  # each batch once
    same(read_pandas(tmp_path / "out"), expected)
    same(read_duckdb(tmp_path / "out"), expected)
    # Ranges of two buckets; [2, 4) held d only, [4, 5) e and f; no file for an empty range.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        part_name(0, 1),
        part_name(2, 3),
        part_name(4, 4),
    ]
    assert made.progress.load() == 5
    assert server.log.info(STREAM)["acks"][f"{TASK}.sink"] == 5
    # The open bucket is written once it closes.
    server.log.advance(STREAM, 6)
    drain(made)
    same(read_pandas(tmp_path / "out"), final_rows(held, 6))


def test_a_restart_from_an_older_progress_file_leaves_the_directory_equal(
    server: StreamServer, tmp_path: Path
) -> None:
    held = fill(server)
    drain(writer(server, tmp_path, max_buckets=2))
    before = sorted(p.name for p in (tmp_path / "out").iterdir())
    expected = final_rows(held, 5)
    # The agent restarted from a progress file older than its files (it died after a rename,
    # before saving), and its log holds those buckets again: the producer re-wrote its
    # batches after the failover. The restarted writer plans bigger ranges, but keeps to the
    # ranges on disk, replacing each with the same rows.
    again = StreamServer()
    try:
        again.log.declare(STREAM, 1.0)
        fill(again)
        Progress(tmp_path / "sinks" / f"{TASK}.json", SPEC).save(0)
        drain(writer(again, tmp_path, max_buckets=60))
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before
        same(read_pandas(tmp_path / "out"), expected)
        same(read_duckdb(tmp_path / "out"), expected)
    finally:
        again.shutdown()
    # Once acknowledged, the log's own position is the writer's: an older file skips to it.
    Progress(tmp_path / "sinks" / f"{TASK}.json", SPEC).save(1)
    drain(writer(server, tmp_path))
    same(read_duckdb(tmp_path / "out"), expected)


def test_the_writer_holds_the_log_against_other_consumers(
    server: StreamServer, tmp_path: Path
) -> None:
    held = fill(server)
    made = writer(server, tmp_path)
    server.log.ack(STREAM, "A.next", 5)  # a downstream fragment read everything
    assert server.log.table(STREAM).num_rows == 7  # nothing trimmed: the sink holds it
    drain(made)
    same(read_pandas(tmp_path / "out"), final_rows(held, 5))
    assert server.log.info(STREAM)["first"] == 5  # written and acknowledged: trimmed now


def test_tentative_rows_and_the_kind_column_stay_out(server: StreamServer, tmp_path: Path) -> None:
    kinds = ["STABLE", "TENTATIVE", "STABLE"]
    server.log.append(STREAM, rows((0.1, "a"), (0.2, "t"), (0.3, "b"), kinds=kinds), boundary=1)
    drain(writer(server, tmp_path))
    found = read_pandas(tmp_path / "out")
    assert list(found["name"]) == ["a", "b"]
    assert list(found.columns) == ["stime", "name", "value"]


def test_a_partial_write_is_never_visible(
    server: StreamServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = fill(server)
    made = writer(server, tmp_path, max_buckets=2)
    made.step()  # part 0-1 on disk
    directory = tmp_path / "out"
    real_write = pq.write_table

    def torn(table: pa.Table, where: Path, **kwargs: object) -> None:
        Path(where).write_bytes(b"PAR1 half a file")  # the machine dies mid-write
        raise OSError("disk gone")

    monkeypatch.setattr(pq, "write_table", torn)
    with pytest.raises(OSError, match="disk gone"):
        made.step()
    assert made.progress.load() == 2  # not past what is on disk
    # A temp file a dead writer left behind is never read by either reader.
    (directory / f".{part_name(2, 3)}.tmp-deadbeef").write_bytes(b"PAR1 half a file")
    names = [p.name for p in directory.iterdir()]
    assert part_name(2, 3) not in names
    same(read_pandas(directory), final_rows(held, 2))
    same(read_duckdb(directory), final_rows(held, 2))
    listing = f"select distinct filename from read_parquet('{directory}/*.parquet', filename=true)"
    files = query(listing).fetchall()
    assert all(".tmp" not in str(f) for (f,) in files)
    monkeypatch.setattr(pq, "write_table", real_write)
    again = writer(server, tmp_path, max_buckets=2)  # a restart cleans the temp files up
    assert not [p for p in directory.iterdir() if ".tmp" in p.name]
    drain(again)
    same(read_duckdb(directory), final_rows(held, 5))


def owned(name: str, owner: str, work: dict[str, object]) -> TaskRecord:
    return TaskRecord(name=name, owner=owner, host="B", load=1.0, work=work)


def test_the_agents_hook_runs_writers_for_owned_tasks_with_a_sink(
    server: StreamServer, tmp_path: Path
) -> None:
    server.log.declare("A.other.out", 1.0)
    sql = "select * from t"
    tasks = [
        owned(TASK, "A", {"sql": sql, "sink": {"kind": "parquet", "path": str(tmp_path / "out")}}),
        owned("A.other", "A", {"sql": sql, "sink": {"kind": "log"}}),
        owned("C.q", "C", {"sql": sql, "sink": {"kind": "parquet", "path": str(tmp_path / "c")}}),
    ]
    writers = SinkWriters(server.log, tmp_path)
    try:
        writers.sync("A", tasks)
        assert set(writers.writers) == {TASK}
        held = fill(server)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and writers.writers[TASK][1].next != 5:
            time.sleep(0.05)
        same(read_pandas(tmp_path / "out"), final_rows(held, 5))
        writers.sync("A", tasks[1:])  # the task is gone: its writer stops
        assert writers.writers == {}
    finally:
        writers.close()


def test_readers_see_whole_ranges_at_any_time(server: StreamServer, tmp_path: Path) -> None:
    # Buckets 0..39, two rows each, written one range of one bucket at a time by the writer's
    # thread while pandas and DuckDB read the directory over and over.
    for bucket in range(40):
        server.log.append(
            STREAM,
            rows((bucket + 0.1, f"a{bucket}"), (bucket + 0.6, f"b{bucket}")),
            batch_id=bucket,
        )
    made = writer(server, tmp_path, max_buckets=1, poll_seconds=0.001)
    directory = tmp_path / "out"
    made.start()
    try:
        for boundary in range(1, 41):
            server.log.advance(STREAM, boundary)
            if not list(directory.glob("part-*.parquet")):
                continue
            assert len(read_pandas(directory)) % 2 == 0  # whole buckets only, never half a file
            assert len(read_duckdb(directory)) % 2 == 0
    finally:
        made.stop()
    drain(made)
    assert len(read_duckdb(directory)) == 80
