"""SQL fragments through the real runtime (SUnion -> the SQL -> SOutput) against Flight logs,
compared with the same rows computed by pandas; and their analysis on Spark before they run."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from app.participant.ports import TaskRecord
from spark_jobs.fragments.sql import FragmentInput, merged_schema, sql_fragment
from spark_jobs.runtime import FragmentSpec, StreamRef, publish
from spark_jobs.runtime.own_work import WorkHosting
from tests.integration.runtime.conftest import BUCKET, declare

pytestmark = pytest.mark.spark

T0 = datetime(2026, 1, 1, tzinfo=UTC)
READINGS = "station STRING, ts TIMESTAMP, temp DOUBLE"
ALARMS = "station STRING, ts TIMESTAMP, level INT"
WINDOWED = (
    "SELECT window(ts, '4 seconds') AS window, station, count(*) AS n, "
    "round(avg(temp), 6) AS avg_temp FROM readings "
    "GROUP BY window(ts, '4 seconds'), station"
)


def readings(seconds: int) -> pa.Table:
    """Three stations, a reading every 0.25 s each, as a source's log holds them (stime = ts)."""
    times, stations, temps = [], [], []
    for step in range(seconds * 4):
        for n, station in enumerate(("north", "south", "east")):
            if (step + n) % 5 == 0:
                continue  # gaps, so counts differ per window and station
            times.append(T0 + timedelta(seconds=step / 4))
            stations.append(station)
            temps.append(10.0 + n + (step % 7) * 0.5)
    ts = pa.array(times, pa.timestamp("us", tz="UTC"))
    return pa.table({"station": stations, "ts": ts, "temp": temps, "stime": ts})


def windowed_reference(table: pa.Table, watermark: datetime) -> list[tuple]:
    """What append mode emits: each (4 s window, station) whose end the watermark reached."""
    frame = table.to_pandas()
    frame["start"] = frame["ts"].dt.floor("4s")
    frame["end"] = frame["start"] + pd.Timedelta(seconds=4)
    grouped = frame.groupby(["start", "end", "station"]).agg(
        n=("temp", "size"), avg_temp=("temp", "mean")
    )
    return sorted(
        (start.to_pydatetime(), end.to_pydatetime(), station, int(row.n), round(row.avg_temp, 6))
        for (start, end, station), row in grouped.iterrows()
        if end.to_pydatetime() <= watermark
    )


def spec_of(name, build, inputs, sources, home) -> FragmentSpec:
    return FragmentSpec(
        name=name,
        build=build,
        input_schema=merged_schema(inputs),
        inputs=tuple(StreamRef(server.location, stream) for server, stream in sources),
        output=StreamRef(home.location, "out"),
        bucket_seconds=BUCKET,
        trigger_seconds=0.2,
        max_buckets_per_batch=3,
    )


def test_a_windowed_sql_aggregation_equals_pandas_over_the_same_rows(servers, make_runtime):
    source, home = servers["source"], servers["home"]
    declare(home, "out").close()
    inputs = [FragmentInput("readings", READINGS, "ts")]
    spec = spec_of(
        "avg", sql_fragment(WINDOWED, inputs, "0 seconds"), inputs, [(source, "readings")], home
    )
    table = readings(13)
    with declare(source, "readings") as client:
        publish(client, "readings", table, BUCKET)
    host = make_runtime("A")
    host.start(spec, epoch=0).processAllAvailable()
    host.stop("avg")
    out = home.log.table("out")
    # The window stays a struct in the Arrow log, and stime is its end.
    assert out.schema.names == ["window", "station", "n", "avg_temp", "stime"]
    assert pa.types.is_struct(out.schema.field("window").type)
    got = sorted(
        (r["window"]["start"], r["window"]["end"], r["station"], r["n"], r["avg_temp"])
        for r in out.to_pylist()
    )
    assert all(r["stime"] == r["window"]["end"] for r in out.to_pylist())
    expected = windowed_reference(table, max(table.column("ts").to_pylist()))
    assert len(expected) >= 6, "the reference must close windows, or the comparison proves little"
    assert got == expected


def test_each_input_view_shows_its_own_rows_and_columns(servers, make_runtime):
    """Two sources of different schemas in one SUnion: each SQL table is one input's rows."""
    source, home = servers["source"], servers["home"]
    declare(home, "out").close()
    inputs = [FragmentInput("readings", READINGS, "ts"), FragmentInput("alarms", ALARMS, "ts")]
    sql = (
        "SELECT 'r' AS kind, station, ts, temp AS value FROM readings "
        "UNION ALL SELECT 'a', station, ts, CAST(level AS DOUBLE) FROM alarms"
    )
    spec = spec_of(
        "both",
        sql_fragment(sql, inputs, None),
        inputs,
        [(source, "readings"), (source, "alarms")],
        home,
    )
    table = readings(4)
    alarms = pa.table(
        {
            "level": pa.array(range(table.num_rows), pa.int32()),
            "station": table.column("station"),
            "stime": table.column("stime"),
            "ts": table.column("ts"),
        }
    )
    with declare(source, "readings", "alarms") as client:
        publish(client, "readings", table, BUCKET)
        publish(client, "alarms", alarms, BUCKET)
    host = make_runtime("A")
    host.start(spec, epoch=0).processAllAvailable()
    host.stop("both")
    out = home.log.table("out")
    assert out.schema.names == ["kind", "station", "ts", "value", "stime"]
    rows = out.to_pylist()
    assert all(r["stime"] == r["ts"] for r in rows)  # stime is the event-time column passed on
    got = sorted((r["kind"], r["station"], r["ts"], r["value"]) for r in rows)
    expected = sorted(
        [("r", r["station"], r["ts"], r["temp"]) for r in table.to_pylist()]
        + [("a", r["station"], r["ts"], float(r["level"])) for r in alarms.to_pylist()]
    )
    assert got == expected


class Reports:
    """The registry's side of ``report_analysis``, as a list."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def report_analysis(self, task: str, *, error: str | None, output_schema: str | None) -> None:
        self.calls.append((task, {"error": error, "output_schema": output_schema}))


def sql_task(sql: str, watermark: str | None = "0 seconds") -> TaskRecord:
    work: dict[str, Any] = {"sql": sql}
    if watermark:
        work["watermark"] = watermark
    return TaskRecord(
        name="A.avg",
        owner="A",
        host="A",
        load=0.0,
        inputs=("A.readings",),
        work=work,
        input_schemas=(READINGS,),
        input_event_times=("ts",),
    )


@pytest.mark.parametrize(
    ("sql", "spark_says"),
    [
        ("SELECT nosuchfunction(temp) AS t, ts FROM readings", "UNRESOLVED_ROUTINE"),
        ("SELECT humidity, ts FROM readings", "UNRESOLVED_COLUMN"),
        # Append mode cannot emit an aggregation the watermark never closes.
        ("SELECT station, count(*) AS n, max(ts) AS ts FROM readings GROUP BY station", "append"),
    ],
)
def test_an_analysis_error_is_reported_with_sparks_message_and_nothing_runs(spark, sql, spark_says):
    reports = Reports()
    hosting = WorkHosting(reports, [])
    assert hosting.fragment(sql_task(sql), spark) is None
    [(task, body)] = reports.calls
    assert task == "A.avg" and body["output_schema"] is None
    assert spark_says in body["error"]
    assert "\tat " not in body["error"]  # Spark's sentence, not the JVM's stack
    # Asked again for the same work (every tick does): analysed and reported once.
    assert hosting.fragment(sql_task(sql), spark) is None
    assert len(reports.calls) == 1


def test_an_output_without_event_time_is_an_analysis_error(spark):
    reports = Reports()
    WorkHosting(reports, []).fragment(sql_task("SELECT station, temp FROM readings"), spark)
    assert reports.calls[0][1]["error"] == (
        "the output has no event time: select a window(...) or the event-time column"
    )


def test_a_query_that_analyses_reports_its_output_schema(spark):
    reports = Reports()
    fragment = WorkHosting(reports, []).fragment(sql_task(WINDOWED), spark)
    assert fragment is not None and fragment.kind == "sql"
    assert reports.calls == [
        (
            "A.avg",
            {
                "error": None,
                "output_schema": "window struct<start:timestamp,end:timestamp>, station string, "
                "n bigint, avg_temp double, stime timestamp",
            },
        )
    ]


def test_a_partner_hosting_the_task_refuses_it_without_reporting(spark):
    """The registry takes a task's analysis from its owner only: a partner's host logs it."""
    reports = Reports()
    hosting = WorkHosting(reports, [], me="B")
    assert hosting.fragment(sql_task("SELECT humidity, ts FROM readings"), spark) is None
    assert reports.calls == []
    assert "UNRESOLVED_COLUMN" in (hosting.error("A.avg") or "")


def test_a_fragments_output_feeds_the_next_sql_fragment_with_its_window_and_stime(
    servers, make_runtime
):
    """The output log (a window struct, stime its end) is the next fragment's input as the
    reported DDL describes it; that fragment sees stime, its input's event time."""
    source, home = servers["source"], servers["home"]
    declare(home, "out", "busy").close()
    first = [FragmentInput("readings", READINGS, "ts")]
    avg = spec_of(
        "avg", sql_fragment(WINDOWED, first, "0 seconds"), first, [(source, "readings")], home
    )
    reported = (
        "window struct<start:timestamp,end:timestamp>, station string, n bigint, "
        "avg_temp double, stime timestamp"
    )
    second = [FragmentInput("avg", reported)]
    busy = dataclasses.replace(
        spec_of(
            "busy",
            sql_fragment(
                "SELECT window.start AS start, station, n, stime FROM avg WHERE n >= 10",
                second,
                None,
            ),
            second,
            [(home, "out")],
            home,
        ),
        output=StreamRef(home.location, "busy"),
    )
    with declare(source, "readings") as client:
        publish(client, "readings", readings(13), BUCKET)
    host = make_runtime("A")
    host.start(avg, epoch=0).processAllAvailable()
    # The output's BOUNDARY follows each batch (the runtime's progress listener): wait for it.
    deadline = time.monotonic() + 30
    while home.log.info("out")["boundary"] in (None, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Read before the next fragment acknowledges (and so trims) them: the windows it may read,
    # those in buckets the output's BOUNDARY closed.
    closed = T0 + timedelta(seconds=home.log.info("out")["boundary"] - T0.timestamp())
    windows = [w for w in home.log.table("out").to_pylist() if w["stime"] < closed]
    host.start(busy, epoch=0).processAllAvailable()
    host.stop("busy")
    host.stop("avg")
    expected = sorted(
        (w["window"]["start"], w["station"], w["n"], w["stime"]) for w in windows if w["n"] >= 10
    )
    got = sorted(tuple(r.values()) for r in home.log.table("busy").to_pylist())
    assert len(expected) >= 4 and got == expected
