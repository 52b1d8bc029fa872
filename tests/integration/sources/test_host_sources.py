"""The agent's host runs each source kind a task declares (``SparkParticipantHost._publish``):
``source: {kind: generator}`` as the seeded generator, a nats source through
``spark_jobs.sources`` into the log on the agent's own endpoint, and a source that cannot run
is reported on the task once (``report_analysis``) however often it retries."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.participant.ports import TaskRecord
from spark_jobs.runtime.participant_host import SparkParticipantHost
from tests.integration.sources.conftest import wait_for
from tests.integration.sources.test_nats_source import FIRST, jetstream, publish  # noqa: F401
from tests.support.components import nats_url

SCHEMA = "station STRING, ts TIMESTAMP, temp DOUBLE"


class Registry:
    """Only what a host asks when it starts sources."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.reported = threading.Event()

    def report_analysis(self, task: str, **report: Any) -> None:
        self.reports.append((task, report))
        self.reported.set()


@pytest.fixture
def host(tmp_path: Path) -> Any:
    made = SparkParticipantHost(
        "O",
        Registry(),  # type: ignore[arg-type]  # a stand-in with only what sources ask
        tmp_path,
        spark=lambda: pytest.fail("no source here needs Spark"),
    )
    try:
        yield made
    finally:
        made.close()


def task(name: str, source: dict[str, Any]) -> TaskRecord:
    return TaskRecord(name=name, owner="O", host="O", load=0.0, work={"source": source})


def test_a_generator_source_is_the_seeded_generator(host: SparkParticipantHost) -> None:
    record = task("gen", {"kind": "generator", "seed": 3, "rate": 20, "seconds": 1})
    host._publish(record)
    wait_for(lambda: host.server.log.info("gen.out")["boundary"] is not None, "a boundary", 30)
    assert host.server.log.info("gen.out")["rows"] > 0


def test_a_nats_source_feeds_the_log_on_the_agents_endpoint(
    host: SparkParticipantHost,
    jetstream: str,  # noqa: F811
) -> None:
    record = task(
        "readings",
        {
            "kind": "nats",
            "schema": SCHEMA,
            "event_time": "ts",
            "url": nats_url(),
            "stream": jetstream,
        },
    )
    last = publish(f"{jetstream}.r", [("x", 100, 1.0), ("y", 1200, 2.0), ("x", 2300, 3.0)])
    host._publish(record)
    wait_for(lambda: host.server.log.info("readings.out")["boundary"] == FIRST + 2, "boundary")
    assert host.server.log.info("readings.out")["rows"] == 2
    source = host._publishers["readings"]
    assert getattr(source, "position", None) == last + 1
    assert (host.data_dir / "sources" / "readings" / "state.json").exists()


def test_a_source_that_cannot_run_is_reported_once(host: SparkParticipantHost) -> None:
    record = task(
        "broken",
        {
            "kind": "nats",
            "schema": SCHEMA,
            "event_time": "ts",
            "url": "nats://127.0.0.1:9",
            "stream": "nothing",
        },
    )
    host._publish(record)
    registry = host.client
    assert isinstance(registry, Registry)
    assert registry.reported.wait(30)
    threading.Event().wait(2.5)  # a few retries (one a second): still one report
    assert len(registry.reports) == 1
    name, report = registry.reports[0]
    assert name == "broken" and report["output_schema"] is None
    assert "nats://127.0.0.1:9" in report["error"]
