"""Federation files with participants' own work: sources, SQL, sinks, synthetic tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.federation.document import FederationFileError, load_federation, parse_federation

HEAD = """federation: weather
participants:
  - {name: A, capacity: 100}
tasks:
"""
READINGS = """  - name: A.readings
    owner: A
    source: {kind: files, format: json, path: /data/readings,
             schema: "station STRING, ts TIMESTAMP, temp DOUBLE", event_time: ts}
"""
DAILY = (
    "  - name: A.daily\n"
    "    owner: A\n"
    "    inputs: [{task: A.readings}]\n"
    "    sql: \"SELECT window(ts, '1 day') AS day, station, avg(temp) AS mean_temp FROM readings "
    "GROUP BY window(ts, '1 day'), station\"\n"
    '    watermark: "1 hour"\n'
    "    sink: {kind: parquet, path: /results/daily}\n"
)


def error_of(text: str, **options: bool) -> str:
    with pytest.raises(FederationFileError) as caught:
        parse_federation(text, source="fed.yaml", **options)
    return str(caught.value)


def test_the_weather_example_loads_with_its_schemas() -> None:
    doc = parse_federation(HEAD + READINGS + DAILY)
    readings, daily = doc.tasks
    assert (readings.load, readings.synthetic, readings.inputs) == (0.0, False, ())
    assert readings.output_schema == "station string, ts timestamp, temp double, stime timestamp"
    assert readings.work["source"]["path"] == "/data/readings"
    assert daily.inputs == ("A.readings",)
    assert daily.output_schema == (
        "day struct<start:timestamp,end:timestamp>, station string, mean_temp double, "
        "stime timestamp"
    )
    assert daily.work["watermark"] == "1 hour"
    assert daily.work["sink"] == {"kind": "parquet", "path": "/results/daily"}


def test_a_reader_may_come_before_the_task_it_reads() -> None:
    doc = parse_federation(HEAD + DAILY + READINGS)
    assert [t.name for t in doc.tasks] == ["A.daily", "A.readings"]
    assert doc.tasks[0].output_schema is not None


def test_a_bad_column_names_the_file_line_task_and_field() -> None:
    broken = DAILY.replace("avg(temp)", "avg(tmp)")
    assert error_of(HEAD + READINGS + broken) == (
        "fed.yaml:12: tasks[1].sql: unknown column 'tmp' in readings (it has station, ts, temp)"
    )


def test_sql_that_does_not_parse_is_refused() -> None:
    broken = DAILY.replace("SELECT window", "SELECT (window")
    assert error_of(HEAD + READINGS + broken).startswith(
        "fed.yaml:12: tasks[1].sql: the query does not parse as Spark SQL"
    )


def test_synthetic_tasks_declare_a_load_and_old_files_keep_working() -> None:
    doc = parse_federation(HEAD + "  - {name: A.q1, owner: A, load: 5}\n")
    assert (doc.tasks[0].synthetic, doc.tasks[0].load) == (True, 5.0)
    explicit = parse_federation(HEAD + "  - {name: A.q1, owner: A, load: 5, synthetic: true}\n")
    assert explicit.tasks[0].synthetic is True
    assert error_of(HEAD + "  - {name: A.q1, owner: A}\n") == (
        "fed.yaml:5: tasks[0].load: a synthetic task declares its load (load: <load units>); "
        "a real one is measured"
    )


def test_an_input_whose_schema_does_not_fit_is_named() -> None:
    ints = READINGS.replace("A.readings", "A.ints").replace("temp DOUBLE", "temp INT")
    merged = DAILY.replace("[{task: A.readings}]", "[{task: A.readings}, {task: A.ints}]")
    assert error_of(HEAD + READINGS + ints + merged) == (
        "fed.yaml:15: tasks[2].inputs[1].task: inputs A.readings and A.ints are merged into one "
        "stream, so their schemas must match: column 'temp' is double in A.readings, int in A.ints"
    )


def test_an_unknown_distribution_is_refused() -> None:
    hot = """  - name: A.hot
    owner: A
    inputs: [{task: A.readings}]
    python: "netmon.fragments:hot"
    distribution: no-such-distribution-here
    schema: "station STRING"
"""
    assert error_of(HEAD + READINGS + hot) == (
        "fed.yaml:13: tasks[1].distribution: unknown distribution 'no-such-distribution-here': "
        "it is not installed here; write 'no-such-distribution-here==<version>'"
    )
    pinned = hot.replace("no-such-distribution-here", "no-such-distribution-here==1.0")
    assert parse_federation(HEAD + READINGS + pinned).tasks[1].work["distribution_version"] == "1.0"


def test_inputs_in_a_cycle_are_refused() -> None:
    a = """  - {name: A.a, owner: A, inputs: [{task: A.b}], sql: "SELECT * FROM b"}\n"""
    b = """  - {name: A.b, owner: A, inputs: [{task: A.a}], sql: "SELECT * FROM a"}\n"""
    assert "reads its own output through its inputs" in error_of(HEAD + a + b)


def test_a_missing_directory_is_refused_only_where_the_file_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "fed.yaml"
    path.write_text(HEAD + READINGS + DAILY)
    assert len(load_federation(path).tasks) == 2
    with pytest.raises(FederationFileError) as caught:
        load_federation(path, check_paths=True)
    assert str(caught.value) == (
        f"{path}:7: tasks[0].source.path: directory '/data/readings' does not exist (a files "
        "source reads a directory on its owner's host)"
    )
    here = tmp_path / "readings"
    here.mkdir()
    path.write_text(HEAD + READINGS.replace("/data/readings", str(here)) + DAILY)
    assert len(load_federation(path, check_paths=True).tasks) == 2


def test_the_schema_accepts_the_new_fields_and_refuses_unknown_ones() -> None:
    assert "tasks[0].sauce" in error_of(HEAD + "  - {name: A.x, owner: A, sauce: 1}\n")
    assert "tasks[0].source.kind" in error_of(
        HEAD + "  - {name: A.x, owner: A, source: {kind: kafka}}\n"
    )
