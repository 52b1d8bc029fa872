"""A task record's own work as a host's fragment, without Spark: inputs by local name, the
SUnion schema, refusals before anything is built, and the DDL an analysis reports."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import StructType

from app.participant.ports import TaskRecord
from app.work.spec import parse_ddl
from spark_jobs.fragments.python import FragmentRefused, FragmentUnavailable
from spark_jobs.fragments.sql import FragmentAnalysisError, FragmentInput, parse_schema
from spark_jobs.runtime.own_work import WorkHosting, fragment_inputs, schema_ddl, work_fragment
from spark_jobs.runtime.sunion import INPUT_COLUMN
from tests.unit.fragments import fragment_dist


def record(work: dict[str, Any], **extra: Any) -> TaskRecord:
    fields: dict[str, Any] = {
        "name": "A.q",
        "owner": "A",
        "host": "A",
        "load": 1.0,
        "inputs": ("A.readings", "A.hot"),
        "work": work,
        "input_schemas": ("station STRING, ts TIMESTAMP", "stime TIMESTAMP, station STRING"),
        "input_event_times": ("ts", None),
    }
    fields.update(extra)
    return TaskRecord(**fields)


def test_inputs_are_named_locally_and_a_fragments_event_time_is_stime():
    assert fragment_inputs(record({"sql": "SELECT 1"})) == [
        FragmentInput("readings", "station STRING, ts TIMESTAMP", "ts"),
        FragmentInput("hot", "stime TIMESTAMP, station STRING", "stime"),
    ]


def test_an_input_without_a_schema_cannot_be_built():
    with pytest.raises(FragmentAnalysisError, match=r"input A\.hot has no declared schema"):
        fragment_inputs(record({"sql": "SELECT 1"}, input_schemas=("a INT",)))


def test_a_sql_fragment_reads_every_inputs_columns_and_the_tag():
    built = work_fragment(record({"sql": "SELECT * FROM readings"}), [])
    assert built.kind == "sql"
    assert built.input_schema.names == ["station", "ts", "stime", INPUT_COLUMN]


def python_work(version: str = fragment_dist.VERSION) -> dict[str, Any]:
    return {
        "python": f"{fragment_dist.MODULE}:hot_readings",
        "distribution": fragment_dist.NAME,
        "distribution_version": version,
    }


def test_a_python_fragment_of_a_distribution_not_allowed_is_refused_before_loading():
    # Not even installed: the operator's list is checked first.
    with pytest.raises(FragmentRefused, match="--fragments fedload-test-fragments"):
        work_fragment(record(python_work()), ["other"])


def test_an_allowed_python_fragment_needs_its_registered_version(tmp_path):
    fragment_dist.install(tmp_path)
    try:
        built = work_fragment(record(python_work()), [fragment_dist.NAME])
        assert built.kind == "python"
        with pytest.raises(FragmentUnavailable, match="registered with"):
            work_fragment(record(python_work("2.0")), [fragment_dist.NAME])
    finally:
        fragment_dist.uninstall(tmp_path)


def test_a_refusal_is_reported_once_without_spark():
    calls: list[tuple[str, str | None]] = []

    class Registry:
        def report_analysis(self, task: str, *, error: str | None, output_schema: str | None):
            calls.append((task, error))

    hosting = WorkHosting(Registry(), ["other"], me="A")
    assert hosting.fragment(record(python_work()), None) is None
    assert hosting.fragment(record(python_work()), None) is None
    assert len(calls) == 1 and "does not allow" in (calls[0][1] or "")


def test_the_reported_ddl_is_what_the_registry_parses_back():
    ddl = (
        "window struct<start:timestamp,end:timestamp>, `odd name` string, "
        "m map<string,array<decimal(5,2)>>, stime timestamp"
    )
    schema = parse_schema(ddl)
    assert isinstance(schema, StructType)
    assert schema_ddl(schema) == ddl
    assert parse_ddl(schema_ddl(schema), ()).ddl() == parse_ddl(ddl, ()).ddl()
