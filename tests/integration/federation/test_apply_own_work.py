"""Applying a federation file of participants' own work, on SQLite and PostgreSQL: the tasks
are registered with their schemas, applying again changes nothing (nor what the owner's agent
measured and analysed), and ``fedload contracts apply`` refuses a missing files directory."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from app.db.session import unit_of_work
from app.federation.apply import apply_federation
from app.federation.document import parse_federation
from app.models import Task
from tests.integration.federation.test_apply import ROOT, _cli
from tests.support.snapshot import registry_snapshot


def weather(readings: Path) -> str:
    return f"""federation: weather
participants:
  - {{name: A, capacity: 100}}
tasks:
  - name: A.readings
    owner: A
    source: {{kind: files, format: json, path: {readings},
             schema: "station STRING, ts TIMESTAMP, temp DOUBLE", event_time: ts}}
  - name: A.daily
    owner: A
    inputs: [{{task: A.readings}}]
    sql: "SELECT window(ts, '1 day') AS day, station, avg(temp) AS mean_temp FROM readings GROUP BY window(ts, '1 day'), station"
    watermark: "1 hour"
    sink: {{kind: parquet, path: /results/daily}}
  - {{name: A.q1, owner: A, load: 5}}
"""  # noqa: E501


def stored(db_url: str) -> dict[str, tuple[object, ...]]:
    with unit_of_work(db_url) as session:
        return {
            t.name: (t.load, t.synthetic, t.fragment, t.work, t.output_schema, t.inputs)
            for t in session.scalars(select(Task).order_by(Task.name))
        }


def test_the_weather_file_registers_its_tasks_and_applies_idempotently(
    db_url: str, tmp_path: Path
) -> None:
    doc = parse_federation(weather(tmp_path))
    with unit_of_work(db_url) as session:
        result = apply_federation(session, doc, actor="file:weather")
    assert "task A.daily: created" in result.changes
    tasks = stored(db_url)
    assert tasks["A.q1"][:3] == (5.0, True, None)
    load, synthetic, fragment, work, schema, inputs = tasks["A.daily"]
    assert (load, synthetic, fragment, inputs) == (0.0, False, None, [{"task": "A.readings"}])
    assert work["sql"].startswith("SELECT window(ts, '1 day') AS day")
    assert work["sink"] == {"kind": "parquet", "path": "/results/daily"}
    assert schema == (
        "day struct<start:timestamp,end:timestamp>, station string, mean_temp double, "
        "stime timestamp"
    )
    assert tasks["A.readings"][3]["source"]["path"] == str(tmp_path)
    # The host measured a load and the agent analysed the query; applying again keeps both.
    with unit_of_work(db_url) as session:
        daily = session.scalar(select(Task).where(Task.name == "A.daily"))
        assert daily is not None
        daily.load, daily.output_schema = 7.5, "day struct<start:timestamp,end:timestamp>"
    before = registry_snapshot(db_url)
    with unit_of_work(db_url) as session:
        again = apply_federation(session, doc, actor="file:weather")
    assert again.changes == []
    assert registry_snapshot(db_url) == before
    # A changed query is new work: its schema is the file's again.
    changed = parse_federation(weather(tmp_path).replace("avg(temp)", "max(temp)"))
    with unit_of_work(db_url) as session:
        third = apply_federation(session, changed, actor="file:weather")
    assert third.changes == ["task A.daily: updated ['output_schema', 'work']"]
    assert stored(db_url)["A.daily"][0] == 7.5


def test_cli_apply_refuses_a_missing_directory_and_writes_nothing(
    db_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "absent"
    path = tmp_path / "weather.yaml"
    path.write_text(weather(missing))
    first = _cli(["contracts", "apply", str(path)], db_url, ROOT)
    assert first.returncode == 2, first.stderr
    assert first.stderr.strip() == (
        f"error: {path}:7: tasks[0].source.path: directory '{missing}' does not exist (a files "
        "source reads a directory on its owner's host); fix the file and apply it again "
        "(nothing was written)"
    )
    assert stored(db_url) == {}
    missing.mkdir()
    second = _cli(["contracts", "apply", str(path)], db_url, ROOT)
    assert second.returncode == 0, second.stderr
    assert "task A.daily: created" in second.stdout
    assert set(stored(db_url)) == {"A.daily", "A.q1", "A.readings"}


def test_cli_apply_names_a_bad_column_by_file_line_and_field(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "weather.yaml"
    path.write_text(weather(tmp_path).replace("avg(temp)", "avg(tmp)"))
    run = _cli(["contracts", "apply", str(path)], db_url, ROOT)
    assert run.returncode == 2
    assert run.stderr.strip() == (
        f"error: {path}:12: tasks[1].sql: unknown column 'tmp' in readings (it has station, ts, "
        "temp); fix the file and apply it again (nothing was written)"
    )
