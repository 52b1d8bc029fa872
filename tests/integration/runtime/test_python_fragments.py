"""A Python fragment from a participant's own distribution, hosted by the agent's Spark host:
refused (and reported) by an agent whose operator does not allow the distribution, run by one
that does, with output equal to pandas over the same rows."""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import pytest

from app.participant.ports import TaskRecord
from app.work.distributions import FRAGMENTS_ENV
from spark_jobs.runtime import StreamClient, publish
from spark_jobs.runtime.participant_host import SparkParticipantHost
from tests.integration.runtime.test_sql_fragments import READINGS, readings
from tests.unit.fragments import fragment_dist

pytestmark = pytest.mark.spark

TASK = TaskRecord(
    name="A.stations",
    owner="A",
    host="A",
    load=1.0,
    params={"window_seconds": 4},
    inputs=("A.readings",),
    work={
        "python": f"{fragment_dist.MODULE}:per_station",
        "distribution": fragment_dist.NAME,
        "distribution_version": fragment_dist.VERSION,
        "watermark": "0 seconds",
        "schema": "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, station STRING, "
        "avg_temp DOUBLE",
    },
    input_schemas=(READINGS,),
    input_event_times=("ts",),
)


class Registry:
    """The registry calls these ticks make: the analysis reports; anything else is a bug."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, dict[str, Any]]] = []

    def report_analysis(self, task: str, *, error: str | None, output_schema: str | None) -> None:
        self.reports.append((task, {"error": error, "output_schema": output_schema}))

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the registry was asked {name}")


@pytest.fixture
def dist(tmp_path):
    yield fragment_dist.install(tmp_path / "site")
    fragment_dist.uninstall(tmp_path / "site")


def host_of(tmp_path, spark, registry: Registry) -> SparkParticipantHost:
    return SparkParticipantHost(
        "A",
        registry,  # type: ignore[arg-type]
        tmp_path / "A",
        spark=lambda: spark,
        checkpoints=tmp_path / "A" / "checkpoints",
    )


def test_an_agent_that_does_not_allow_the_distribution_refuses_and_reports_it(
    spark, dist, tmp_path, monkeypatch
):
    monkeypatch.setenv(FRAGMENTS_ENV, "some-other-dist")
    registry = Registry()
    host = host_of(tmp_path, spark, registry)
    try:
        host.reconcile([TASK])
        host.reconcile([TASK])
        assert not host.runtime.is_running(TASK.name)
        [(task, body)] = registry.reports
        assert task == TASK.name and body["output_schema"] is None
        assert "which this agent's operator does not allow" in body["error"]
        assert f"--fragments {fragment_dist.NAME}" in body["error"]
    finally:
        host.close()


def test_an_agent_that_allows_it_runs_it_and_its_output_equals_pandas(
    spark, dist, tmp_path, monkeypatch
):
    monkeypatch.setenv(FRAGMENTS_ENV, f"{fragment_dist.NAME}, some-other-dist")
    registry = Registry()
    host = host_of(tmp_path, spark, registry)
    table = readings(13)
    try:
        with StreamClient(host.endpoint) as client:
            client.declare("A.readings.out", 1.0)
            publish(client, "A.readings.out", table, 1.0)
        deadline = time.monotonic() + 60
        while not host.runtime.is_running(TASK.name) and time.monotonic() < deadline:
            host.reconcile([TASK])  # the first tick starts Spark, a later one the query
            time.sleep(0.2)
        host.runtime.query(TASK.name).processAllAvailable()
        [(task, body)] = registry.reports
        assert task == TASK.name
        assert body == {
            "error": None,
            "output_schema": "window struct<start:timestamp,end:timestamp>, station string, "
            "avg_temp double, stime timestamp",
        }
        out = host.server.log.table(TASK.output_stream).to_pylist()
    finally:
        host.close()
    got = sorted((r["window"]["start"], r["station"], round(r["avg_temp"], 6)) for r in out)
    frame = table.to_pandas()
    frame["start"] = frame["ts"].dt.floor("4s")
    last = frame["ts"].max()
    means = frame.groupby(["start", "station"])["temp"].mean()
    expected = sorted(
        (start.to_pydatetime(), station, round(mean, 6))
        for (start, station), mean in means.items()
        if start + pd.Timedelta(seconds=4) <= last
    )
    assert len(expected) >= 6
    assert got == expected
