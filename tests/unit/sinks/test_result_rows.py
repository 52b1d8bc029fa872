"""How rows read from a log become JSON lines (``app.results``): timestamps ISO-8601, values
JSON can hold, and a log's own kind column kept only when tentative rows are asked for."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa

from app.results import _held_from, _table_rows, json_row


def test_values_become_json() -> None:
    row = json_row(
        {
            "stime": dt.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=dt.UTC),
            "day": dt.date(2026, 1, 2),
            "price": decimal.Decimal("1.50"),
            "raw": b"\x00\x01",
            "ratio": float("nan"),
            "tags": ["a", dt.date(2026, 1, 3)],
        }
    )
    assert row == {
        "stime": "2026-01-02T03:04:05.600000+00:00",
        "day": "2026-01-02",
        "price": "1.50",
        "raw": "AAE=",
        "ratio": None,
        "tags": ["a", "2026-01-03"],
    }
    json.dumps(row, allow_nan=False)


def kinded() -> pa.Table:
    return pa.table(
        {
            "stime": pa.array([1, 2, 3], pa.timestamp("us", tz="UTC")),
            "v": [1, 2, 3],
            "kind": ["STABLE", "TENTATIVE", "STABLE"],
            "version": [0, 1, 1],
        }
    )


def test_a_log_with_a_kind_column_keeps_it_only_for_tentative_readers() -> None:
    assert [r["v"] for r in _table_rows(kinded(), tentative=False)] == [1, 3]
    assert all("kind" not in r and "version" not in r for r in _table_rows(kinded(), False))
    assert [(r["v"], r["kind"], r["version"]) for r in _table_rows(kinded(), True)] == [
        (1, "STABLE", 0),
        (2, "TENTATIVE", 1),
        (3, "STABLE", 1),
    ]
    plain = kinded().drop_columns(["kind", "version"])
    assert [r["kind"] for r in _table_rows(plain, True)] == ["STABLE"] * 3


def test_a_reader_starts_at_what_the_log_still_holds() -> None:
    assert _held_from({"first": 3, "acks": {}}) == 3
    # Below the acknowledgements only when the log keeps acknowledged rows for readers.
    assert _held_from({"first": 3, "acks": {"x": 5, "y": 7}}) == 3
    assert _held_from({"first": None, "acks": {"x": 5, "y": 7}}) == 5
    assert _held_from({"first": None, "acks": {}}) is None
