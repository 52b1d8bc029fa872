"""The demo's reference for a SQL fragment: its query as a Spark batch over the same input,
checked against pandas, and a comparison that finds a row lost or written twice."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd
import pytest

from app.federation.document import load_federation
from spark_jobs.scenarios.demo import reading
from spark_jobs.scenarios.sql_reference import batch_output, compare_rows, generator_reference

pytestmark = pytest.mark.spark

SCHEMA = "station string, ts timestamp, temp double"


def _task(name: str) -> dict[str, Any]:
    task = next(t for t in load_federation("contracts/demo.yaml").tasks if t.name == name)
    return {"name": task.name, "inputs": [{"task": i} for i in task.inputs], "work": task.work}


def _rows(seconds: int) -> list[dict[str, Any]]:
    return [
        {**r, "ts": datetime.fromisoformat(r["ts"])}
        for r in (reading(s, t) for t in range(seconds) for s in range(3))
    ]


def test_the_stations_sql_as_a_batch_equals_pandas_over_the_same_readings(spark) -> None:
    rows = _rows(60)
    got = batch_output(spark, _task("A.stations"), SCHEMA, "ts", rows)
    frame = pd.DataFrame(rows)
    frame["end"] = pd.to_datetime(frame["ts"], utc=True).dt.floor("10s") + pd.Timedelta("10s")
    expected = (
        frame.groupby(["end", "station"])["temp"]
        .agg(["mean", "count"])
        .reset_index()
        .to_dict("records")
    )
    assert sorted(
        (pd.Timestamp(r["stime"]).tz_convert("UTC"), r["station"], round(r["mean_temp"], 9), r["n"])
        for r in got
    ) == sorted(
        (r["end"], r["station"], round(float(r["mean"]), 9), int(r["count"])) for r in expected
    )
    assert len(got) == 6 * 3  # six ten-second windows of three stations


def test_a_comparison_finds_a_lost_and_a_doubled_row_before_the_cutoff(spark) -> None:
    reference = batch_output(spark, _task("A.stations"), SCHEMA, "ts", _rows(60))
    assert compare_rows(reference, reference).matches
    ordered = sorted(reference, key=lambda r: (r["stime"], r["station"]))
    lost = compare_rows(ordered[1:], reference)
    assert not lost.matches and lost.missing == 1 and lost.unexpected == 0
    doubled = compare_rows([ordered[0], *ordered], reference)
    assert not doubled.matches and doubled.unexpected == 1
    # The newest window may still be filling: rows after the cutoff are not judged.
    newest = max(r["stime"] for r in reference)
    assert compare_rows([r for r in ordered if r["stime"] != newest], reference).matches


def test_a_generator_reference_regenerates_the_rising_input(spark) -> None:
    source = {
        "work": {
            "source": {
                "kind": "generator",
                "seed": 11,
                "rate": 20,
                "rate_after": 80,
                "rate_from": 20,
                "schema": "src_ip string, dst_ip string, dst_port int, stime timestamp",
                "event_time": "stime",
            }
        }
    }
    counts: dict[Any, int] = {}
    for row in generator_reference(spark, _task("B.classes"), source, 40):
        counts[row["stime"]] = counts.get(row["stime"], 0) + row["connections"]
    windows = sorted(counts)
    assert len(windows) == 4, counts  # seconds 0-40, every window closed
    # 20 connections a second, then 80 from second 20 (the scanners' probes do not rise).
    assert counts[windows[3]] - counts[windows[0]] > 500, counts
