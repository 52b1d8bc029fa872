"""Publishing into a Flight source's log through the client path (``app.publish``): a real
``StreamServer`` with the agents' token check, tokens signed as the registry signs them (a
stand-in registry answers the task, the endpoint and the token). Rows arrive with their event
time, bucket by bucket, with the boundary; a wrong-schema table is refused naming the column and
changes nothing; a republished batch is not appended twice; late rows are counted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.dataplane.tokens import Grant, claims_for, new_signing_key, sign
from app.publish import Publisher, PublishError, SchemaMismatch, publish_file
from spark_jobs.runtime.dataplane import FlightAuth
from spark_jobs.runtime.transport import StreamServer

KEY = new_signing_key()
OWNER, TASK, STREAM = "O", "sensors", "sensors.out"
SOURCE = {
    "kind": "flight",
    "schema": "station STRING, ts TIMESTAMP, temp DOUBLE",
    "event_time": "ts",
}
BASE = datetime(2026, 3, 1, tzinfo=UTC)
FIRST = int(BASE.timestamp())


class Registry:
    """What ``Publisher`` asks of the registry, answered as the service would for ``O``."""

    def __init__(self, location: str, work: dict[str, Any] | None = None) -> None:
        self.location, self.work = location, work if work is not None else {"source": SOURCE}
        self.grants: list[dict[str, Any]] = []

    def task(self, name: str) -> dict[str, Any]:
        return {"name": name, "owner": OWNER, "host": OWNER, "load": 0.0, "work": self.work}

    def endpoint(self, participant: str) -> str | None:
        return self.location if participant == OWNER else None

    def dataplane_token(self, grant: dict[str, Any]) -> dict[str, Any]:
        self.grants.append(grant)
        claims = claims_for(OWNER, OWNER, Grant.from_json(grant), now=time.time(), ttl=300)
        return {"token": sign(claims, KEY), "serving": OWNER, "expires_at": "2100-01-01T00:00:00Z"}

    def close(self) -> None:
        return None


@pytest.fixture
def server() -> Iterator[StreamServer]:
    made = StreamServer(auth=FlightAuth(OWNER, (KEY.public_key(),)))
    made.log.declare(STREAM, 1.0)
    try:
        yield made
    finally:
        made.shutdown()


def readings(*rows: tuple[str, float, float]) -> pa.Table:
    """(station, seconds after BASE, temp)."""
    return pa.table(
        {
            "temp": [t for _, _, t in rows],
            "station": [s for s, _, _ in rows],
            "ts": pa.array([BASE + timedelta(seconds=o) for _, o, _ in rows], pa.timestamp("us")),
        }
    )


def logged(server: StreamServer) -> list[tuple[Any, ...]]:
    rows = server.log.table(STREAM).to_pylist()
    for row in rows:
        assert row["stime"] == row["ts"], "stime is the declared event time"
    return sorted((r["station"], r["ts"], r["temp"]) for r in rows)


def test_publish_appends_by_bucket_with_the_boundary_and_only_once(server: StreamServer) -> None:
    registry = Registry(server.location)
    with Publisher("http://unused", "key", TASK, client=registry) as publisher:
        table = readings(("x", 0.2, 1.0), ("y", 2.5, 2.0), ("x", 1.1, 3.0))
        done = publisher.publish(table)
        assert (done.rows, done.late, done.fresh) == (3, 0, True)
        assert registry.grants == [Grant(frozenset({"append"}), stream=STREAM).to_json()]
        # Lateness 0: the latest event's bucket stays open, every one before it closes.
        assert server.log.info(STREAM)["boundary"] == FIRST + 2 == done.boundary
        again = publisher.publish(table)
        assert (again.fresh, again.rows, again.batch_id) == (False, 0, done.batch_id)
        explicit = publisher.publish(readings(("z", 2.9, 4.0)), batch_id=7)
        assert publisher.publish(readings(("z", 2.9, 4.0)), batch_id=7).fresh is False
        assert explicit.rows == 1
        # Bucket 1 is closed: a row for it is late, counted and dropped; bucket 3 is new.
        later = publisher.publish(readings(("y", 1.5, 5.0), ("y", 3.2, 6.0)))
        assert (later.rows, later.late) == (1, 1)
    micros = [BASE + timedelta(seconds=s) for s in (0.2, 1.1, 2.5, 2.9, 3.2)]
    assert logged(server) == sorted(
        zip(["x", "x", "y", "z", "y"], micros, [1.0, 3.0, 2.0, 4.0, 6.0], strict=True)
    )
    assert server.log.info(STREAM)["boundary"] == FIRST + 3


def test_a_wrong_schema_is_refused_naming_the_column(server: StreamServer) -> None:
    with Publisher("http://unused", "key", TASK, client=Registry(server.location)) as publisher:
        no_temp = readings(("x", 0.2, 1.0)).drop_columns(["temp"])
        with pytest.raises(SchemaMismatch, match=r"column 'temp'.*missing"):
            publisher.publish(no_temp)
        bad = readings(("x", 0.2, 1.0)).set_column(0, "temp", pa.array(["warm"]))
        with pytest.raises(SchemaMismatch, match="column 'temp'"):
            publisher.publish(bad)
    assert server.log.info(STREAM)["rows"] == 0 and server.log.info(STREAM)["boundary"] is None


def test_only_a_flight_source_takes_published_rows(server: StreamServer) -> None:
    files = {"source": {**SOURCE, "kind": "files", "format": "json", "path": "/data"}}
    with pytest.raises(PublishError, match="a files source"):
        Publisher("http://unused", "key", TASK, client=Registry(server.location, files))


def test_publish_a_parquet_file(server: StreamServer, tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(readings(("x", 0.5, 1.0), ("y", 4.5, 2.0)), path)
    registry = Registry(server.location)
    done = publish_file(TASK, path, api="http://unused", key="key", client=registry)
    assert done.rows == 2 and done.boundary == FIRST + 4
    again = publish_file(TASK, path, api="http://unused", key="key", client=registry)
    assert again.fresh is False and server.log.info(STREAM)["rows"] == 2


def test_with_idle_advance_the_agent_closes_buckets_by_the_wall_clock() -> None:
    from app.work.spec import SourceSpec, parse_ddl
    from spark_jobs.sources import SourceContext, runner_for

    plain = StreamServer()
    try:
        plain.log.declare(STREAM, 0.1)
        spec = SourceSpec(
            "flight", parse_ddl(SOURCE["schema"], ["s"]), "ts", {"idle_advance": True}
        )
        context = SourceContext(TASK, STREAM, plain.location, 0.1, Path("/nonexistent"))
        runner = runner_for(spec, context)
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        deadline = time.time() + 10
        while plain.log.info(STREAM)["boundary"] is None and time.time() < deadline:
            time.sleep(0.05)
        runner.stopped.set()
        thread.join(5)
        boundary = plain.log.info(STREAM)["boundary"]
        assert boundary is not None and abs(boundary - time.time() / 0.1) < 20
    finally:
        plain.shutdown()
