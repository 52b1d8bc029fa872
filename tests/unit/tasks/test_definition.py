"""One rule for a whole task (app.tasks.definition): synthetic or real, inputs that fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.tasks.catalogue import STREAM_SCHEMAS, Upstream
from app.tasks.definition import TaskDefinition, define_task, event_time
from app.work.errors import FragmentError
from app.work.spec import Column, StreamSchema, parse_ddl

READINGS = {
    "kind": "files",
    "format": "json",
    "path": "/data/readings",
    "schema": "station STRING, ts TIMESTAMP, temp DOUBLE",
    "event_time": "ts",
}
TASKS: dict[str, Upstream] = {
    "A.readings": Upstream(
        "A.readings",
        "A",
        None,
        {"source": {**READINGS, "schema": "station string, ts timestamp, temp double"}},
        "station string, ts timestamp, temp double, stime timestamp",
    ),
    "A.more": Upstream(
        "A.more",
        "A",
        None,
        {"source": {**READINGS, "path": "/data/more"}},
        "station string, ts timestamp, temp double, stime timestamp",
    ),
    "A.ints": Upstream(
        "A.ints",
        "A",
        None,
        {"source": READINGS},
        "station string, ts timestamp, temp int, stime timestamp",
    ),
    "A.conns": Upstream("A.conns", "A", "generator"),
    "A.plain": Upstream("A.plain", "A", None),
    "B.readings": Upstream("B.readings", "B", None, {"source": READINGS}, "station string"),
}


def define(raw: dict[str, Any], **options: Any) -> TaskDefinition:
    return define_task(raw, name="A.new", owner="A", upstream=TASKS.get, **options)


def refused(raw: dict[str, Any], **options: Any) -> tuple[str, str]:
    with pytest.raises(FragmentError) as caught:
        define(raw, **options)
    return caught.value.field, caught.value.detail


def test_a_task_with_no_work_is_synthetic_and_declares_its_load() -> None:
    plain = define({"load": 5.0})
    assert (plain.synthetic, plain.load, plain.output_ddl, plain.work.to_json()) == (
        True,
        5.0,
        None,
        {},
    )
    field, detail = refused({})
    assert field == "load"
    assert detail.startswith("a synthetic task declares its load")
    assert define({"load": 2.0, "synthetic": True}).synthetic is True


def test_real_work_starts_at_zero_load_or_at_its_estimate() -> None:
    source = define({"source": READINGS})
    assert (source.synthetic, source.load) == (False, 0.0)
    assert define({"source": READINGS, "load": 3.5}).load == 3.5
    assert source.output_ddl == "station string, ts timestamp, temp double, stime timestamp"


def test_catalogue_fragments_keep_their_stream_schema() -> None:
    reader = define({"fragment": "connections_per_source", "inputs": [{"task": "A.conns"}]})
    assert (reader.synthetic, reader.fragment, reader.inputs) == (
        False,
        "connections_per_source",
        ("A.conns",),
    )
    assert reader.output_ddl == STREAM_SCHEMAS["connection_counts"]
    assert reader.params == {"window_seconds": 10, "threshold": 25}


def test_a_sql_fragment_gets_the_inferred_schema_plus_stime() -> None:
    daily = define(
        {
            "inputs": [{"task": "A.readings"}],
            "sql": "SELECT window(ts, '1 day') AS day, station, avg(temp) AS mean_temp "
            "FROM readings GROUP BY window(ts, '1 day'), station",
            "watermark": "1 hour",
            "sink": {"kind": "parquet", "path": "/results/daily"},
        }
    )
    assert daily.output_ddl == (
        "day struct<start:timestamp,end:timestamp>, station string, mean_temp double, "
        "stime timestamp"
    )
    assert daily.inputs == ("A.readings",)
    assert daily.work.to_json()["sink"] == {"kind": "parquet", "path": "/results/daily"}


def test_a_python_fragment_records_its_distribution_and_declared_schema() -> None:
    raw = {
        "inputs": [{"task": "A.readings"}],
        "python": "netmon.fragments:hot",
        "distribution": "netmon-fragments==1.2",
        "schema": "station STRING, hot BOOLEAN",
    }
    hot = define(raw, distributions={})
    assert hot.output_ddl == "station string, hot boolean, stime timestamp"
    assert (hot.work.distribution, hot.work.distribution_version) == ("netmon-fragments", "1.2")
    # Without a version, the one installed here is recorded; unknown ones are refused.
    found = define(
        {**raw, "distribution": "Netmon_Fragments"}, distributions={"netmon-fragments": "2.0"}
    )
    assert found.work.distribution_version == "2.0"
    field, detail = refused({**raw, "distribution": "netmon-fragments"}, distributions={})
    assert (field, detail) == (
        "distribution",
        "unknown distribution 'netmon-fragments': it is not installed here; write "
        "'netmon-fragments==<version>'",
    )


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        (
            {"fragment": "generator", "sql": "SELECT 1"},
            "sql",
            "a catalogue fragment or its own work",
        ),
        ({"load": 1.0, "synthetic": True, "source": READINGS}, "synthetic", "runs source:files"),
        ({"synthetic": False, "load": 1.0}, "synthetic", "the task runs nothing"),
        ({"load": 1.0, "sink": {"kind": "log"}}, "sink", "belongs to a fragment"),
        ({"source": READINGS, "inputs": [{"task": "A.readings"}]}, "inputs", "reads no inputs"),
        ({"sql": "SELECT * FROM readings"}, "inputs", "reads at least one input"),
        (
            {"sql": "SELECT station FROM readings", "inputs": [{"task": "A.plain"}]},
            "inputs[0].task",
            "task 'A.plain' is synthetic",
        ),
        (
            {"sql": "SELECT station FROM readings", "inputs": [{"task": "B.readings"}]},
            "inputs[0].task",
            "A owns no task named 'B.readings'",
        ),
        (
            {"sql": "SELECT tmp FROM readings", "inputs": [{"task": "A.readings"}]},
            "sql",
            "unknown column 'tmp' in readings (it has station, ts, temp)",
        ),
        (
            {"source": READINGS, "params": {"seed": 1}},
            "params",
            "params configure a catalogue fragment",
        ),
    ],
)
def test_bad_tasks_are_refused_at_the_field(raw: dict[str, Any], field: str, words: str) -> None:
    got_field, detail = refused(raw)
    assert got_field == field
    assert words in detail


def test_merged_inputs_must_have_the_same_columns_and_types() -> None:
    same = define(
        {"sql": "SELECT * FROM readings", "inputs": [{"task": "A.readings"}, {"task": "A.more"}]}
    )
    assert same.inputs == ("A.readings", "A.more")
    field, detail = refused(
        {"sql": "SELECT * FROM readings", "inputs": [{"task": "A.readings"}, {"task": "A.ints"}]}
    )
    assert field == "inputs[1].task"
    assert detail == (
        "inputs A.readings and A.ints are merged into one stream, so their schemas must match: "
        "column 'temp' is double in A.readings, int in A.ints"
    )


def test_a_files_directory_is_checked_only_when_asked(tmp_path: Path) -> None:
    missing = {**READINGS, "path": str(tmp_path / "absent")}
    assert define({"source": missing}).work.source is not None
    field, detail = refused({"source": missing}, check_paths=True)
    assert field == "source.path"
    assert detail.startswith(f"directory '{tmp_path / 'absent'}' does not exist")
    present = {**READINGS, "path": str(tmp_path)}
    assert define({"source": present}, check_paths=True).work.source is not None


def test_event_time_is_a_sources_declared_column_else_stime() -> None:
    assert event_time({"source": READINGS}) == "ts"
    assert event_time({"sql": "SELECT 1"}) == "stime"
    assert event_time({}) == "stime"


NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True) | st.from_regex(
    r"[a-z][a-z ]{0,5}-[a-z]{1,3}", fullmatch=True
)
SIMPLE = st.sampled_from(
    ["string", "boolean", "int", "bigint", "double", "float", "date", "timestamp", "binary"]
)
TYPES = st.recursive(
    SIMPLE
    | st.builds(lambda p, s: f"decimal({p},{min(s, p)})", st.integers(1, 38), st.integers(0, 38)),
    lambda inner: (
        st.builds(lambda t: f"array<{t}>", inner)
        | st.builds(lambda k, v: f"map<{k},{v}>", SIMPLE, inner)
        | st.builds(
            lambda n, t: f"struct<{n}:{t}>", st.from_regex(r"[a-z]{1,5}", fullmatch=True), inner
        )
    ),
    max_leaves=4,
)


@given(st.lists(st.tuples(NAMES, TYPES), min_size=1, max_size=6, unique_by=lambda c: c[0].lower()))
def test_a_schema_written_as_ddl_parses_back_to_itself(columns: list[tuple[str, str]]) -> None:
    declared = StreamSchema(tuple(Column(name, kind) for name, kind in columns))
    assert parse_ddl(declared.ddl(), ()) == declared


def test_a_source_takes_its_lateness_as_an_interval_and_idle_advance_as_a_flag() -> None:
    from app.work.spec import parse_work

    source = {"kind": "nats", "stream": "s", "schema": "a TIMESTAMP", "event_time": "a"}
    work = parse_work(
        {"source": {**source, "lateness": "5 seconds", "idle_advance": True}}, distributions=None
    )
    assert work.source is not None
    assert work.source.options["lateness"] == "5 seconds"
    assert work.source.options["idle_advance"] is True
    with pytest.raises(FragmentError) as bad:
        parse_work({"source": {**source, "lateness": "soon"}}, distributions=None)
    assert bad.value.field == "source.lateness"
    with pytest.raises(FragmentError) as bad:
        parse_work({"source": {**source, "idle_advance": "yes"}}, distributions=None)
    assert bad.value.field == "source.idle_advance"


def test_a_column_named_as_the_federations_own_is_refused_where_it_is_declared() -> None:
    from app.work.spec import parse_work

    source = {"kind": "nats", "stream": "s", "schema": "kind STRING, ts TIMESTAMP"}
    with pytest.raises(FragmentError) as bad:
        parse_work({"source": {**source, "event_time": "ts"}}, distributions=None)
    assert bad.value.field == "source.schema"
    assert "'kind' is reserved" in bad.value.detail
    with pytest.raises(FragmentError) as bad:
        parse_work(
            {"python": "p.m:f", "distribution": "d==1", "schema": "x INT, Fedload_Input INT"},
            distributions=None,
        )
    assert bad.value.field == "schema"
