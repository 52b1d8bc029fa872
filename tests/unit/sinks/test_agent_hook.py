"""The agent's hook: ``SparkParticipantHost.reconcile`` runs a sink writer for each task its
participant owns with a sink, wherever the task runs, and ``close`` stops them. No Spark: the
task is hosted by a partner, so nothing starts here but the owner's log and its writer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from app.participant.ports import TaskRecord
from spark_jobs.runtime.participant_host import SparkParticipantHost


class NoRegistry:
    """The agent asks nothing of the registry in these ticks."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the registry was asked {name}")


def never() -> Any:
    raise AssertionError("Spark was started")


def test_an_owned_task_with_a_sink_is_written_by_the_owners_agent(tmp_path: Path) -> None:
    host = SparkParticipantHost("A", NoRegistry(), tmp_path, spark=never)  # type: ignore[arg-type]
    task = TaskRecord(
        name="A.q",
        owner="A",
        host="B",
        load=1.0,
        work={
            "sql": "select * from t",
            "sink": {"kind": "parquet", "path": str(tmp_path / "results")},
        },
    )
    try:
        host.reconcile([task])
        assert set(host.sinks.writers) == {"A.q"}
        stimes = pa.array([100_000, 1_200_000], pa.timestamp("us", tz="UTC"))
        host.server.log.append("A.q.out", pa.table({"stime": stimes, "v": [1, 2]}), boundary=2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and host.sinks.writers["A.q"][1].next != 2:
            time.sleep(0.05)
        assert list(pd.read_parquet(tmp_path / "results")["v"]) == [1, 2]
        host.reconcile([])  # the task is gone from the records: its writer stops
        assert host.sinks.writers == {}
    finally:
        host.close()
