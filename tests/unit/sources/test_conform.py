"""A source's rows against its declared schema (``app.publish.conform``), as every source kind
checks them: the declared columns cast, ``stime`` added from the event time, and a clear error
naming the column that does not fit."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from app.publish import SchemaMismatch, arrow_schema, conform, lateness_seconds
from app.work.spec import SourceSpec, parse_ddl
from spark_jobs.sources.nats import decode

SCHEMA = parse_ddl("station STRING, ts TIMESTAMP, temp DOUBLE, n INT", ["schema"])


def test_the_log_schema_is_the_declared_columns_then_stime() -> None:
    assert arrow_schema(SCHEMA).names == ["station", "ts", "temp", "n", "stime"]
    assert arrow_schema(SCHEMA).field("stime").type == pa.timestamp("us", tz="UTC")
    nested = parse_ddl("a ARRAY<INT>, m MAP<STRING, DOUBLE>, d DECIMAL(10,2)", ["s"])
    types = [f.type for f in arrow_schema(nested)][:3]
    assert types == [pa.list_(pa.int32()), pa.map_(pa.string(), pa.float64()), pa.decimal128(10, 2)]


def test_conform_casts_reorders_drops_extras_and_adds_stime() -> None:
    given = pa.table(
        {
            "extra": [1],
            "n": pa.array([3], pa.int64()),
            "temp": [20.5],
            "TS": ["2026-01-01T00:00:01.500Z"],
            "station": ["a"],
        }
    )
    out = conform(given, SCHEMA, "ts")
    assert out.schema == arrow_schema(SCHEMA)
    row = out.to_pylist()[0]
    assert row["stime"] == datetime(2026, 1, 1, 0, 0, 1, 500000, tzinfo=UTC) == row["ts"]


def test_a_missing_column_is_named() -> None:
    with pytest.raises(SchemaMismatch, match="'temp'"):
        conform(pa.table({"station": ["a"], "ts": ["2026-01-01T00:00:00"], "n": [1]}), SCHEMA, "ts")


def test_a_column_that_does_not_cast_is_named() -> None:
    bad = pa.table({"station": ["a"], "ts": ["2026-01-01T00:00:00"], "temp": ["warm"], "n": [1]})
    with pytest.raises(SchemaMismatch, match="column 'temp'"):
        conform(bad, SCHEMA, "ts")


def test_lateness_intervals() -> None:
    assert lateness_seconds({}) == 0.0
    assert lateness_seconds({"lateness": "2 minutes"}) == 120.0
    assert lateness_seconds({"lateness": "500 milliseconds"}) == 0.5
    with pytest.raises(ValueError, match="interval"):
        lateness_seconds({"lateness": "soon"})


def test_nats_messages_take_iso_strings_and_epoch_milliseconds() -> None:
    spec = SourceSpec("nats", SCHEMA, "ts", {"stream": "x"})
    messages = [
        b'{"station": "a", "ts": "2026-01-01T00:00:01Z", "temp": 1.0, "n": 1}',
        b'{"station": "b", "ts": 1767225602000, "temp": 2.0, "n": 2}',
        b'{"station": "c", "temp": 3.0}',  # no event time
        b"not json",
        b'{"station": "d", "ts": "2026-01-01T00:00:03", "temp": "hot", "n": 4}',
    ]
    table, malformed = decode(messages, spec)
    assert malformed == 3
    assert table.column("station").to_pylist() == ["a", "b"]
    assert table.column("stime").to_pylist() == [
        datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC),
    ]
