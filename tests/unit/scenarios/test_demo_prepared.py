"""The real-work demo's federation as a run plays it: its directories under the run's, and B's
input rising in B's generator at the time the timeline says."""

from __future__ import annotations

import json
from pathlib import Path

from app.federation.document import load_federation
from spark_jobs.runtime.participant_host import generator_of
from spark_jobs.scenarios.demo import ReadingsWriter, prepared, reading, scaled

DEMO = Path("contracts/demo.yaml")


def test_every_task_of_the_demo_is_real_work() -> None:
    doc = load_federation(DEMO)
    assert not [t.name for t in doc.tasks if t.synthetic or t.load]
    fragments = [t for t in doc.tasks if t.work.get("sql")]
    assert len(fragments) == 6
    assert all(t.work.get("trigger") == "2 seconds" for t in fragments)
    assert any(
        (t.work.get("sink") or {}).get("kind") == "parquet" and t.inputs == ("A.readings",)
        for t in fragments
    ), "a SQL fragment over a files source with a Parquet sink"


def test_directories_go_under_the_run_and_b_rises_when_the_timeline_says(tmp_path: Path) -> None:
    old = tmp_path / "report" / "stations"
    old.mkdir(parents=True)
    (old / "part-1-1.parquet").write_text("an earlier run's")
    doc = prepared(scaled(load_federation(DEMO), 0.5), tmp_path / "work", tmp_path / "report")
    tasks = {t.name: t for t in doc.tasks}

    readings = tasks["A.readings"].work["source"]["path"]
    assert readings == str((tmp_path / "work" / "readings").resolve())
    assert Path(readings).is_dir()
    assert tasks["A.stations"].work["sink"]["path"] == str(old.resolve())
    assert not old.exists(), "the sink's directory is this run's output"

    # The scale_load at 120 s (60 s at half scale) of B, factor 4: B's generator, not A's.
    b = tasks["B.conns"].work["source"]
    assert (b["rate_after"], b["rate_from"]) == (4 * b["rate"], 60)
    assert "rate_after" not in tasks["A.conns"].work["source"]
    generator = generator_of(b)
    assert generator.schedule.rate_at(59) == b["rate"] and generator.schedule.rate_at(60) == 400


def test_the_readings_writer_writes_whole_files_of_every_stations_seconds(tmp_path: Path) -> None:
    directory = tmp_path / "readings"
    directory.mkdir()
    writer = ReadingsWriter(directory)
    writer.start()
    writer.stop()
    files = sorted(directory.glob("*.jsonl"))
    assert [f.name for f in files] == ["readings-00000.jsonl"]
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert rows == writer.rows == [reading(s, t) for t in range(5) for s in range(3)]
    assert not list(tmp_path.glob(".readings-*")), "written aside, then renamed"
