"""A failed scenario prints each agent's last log lines; a JVM trace must not fill them with
frames and hide the message that says what failed (a CI failure printed only frames)."""

from __future__ import annotations

from pathlib import Path

from spark_jobs.scenarios.processes import Managed, fold_stack_frames

TRACE = [
    "2026-11-27 09:25:38,837 app.participant.runtime G.x failed: Py4JJavaError",
    "org.apache.spark.SparkException: Job aborted due to stage failure: lost task",
    *[f"        at org.apache.spark.Frame{n}(Frame.scala:{n})" for n in range(50)],
    "Caused by: java.io.InvalidClassException: local class incompatible",
    "\tat java.base/java.io.ObjectInputStream.readObject(ObjectInputStream.java:509)",
    "\t... 34 more",
    "2026-11-27 09:25:39,001 app.participant.agent G.x restarts",
]


def test_runs_of_frames_fold_into_one_line_and_messages_stay() -> None:
    assert fold_stack_frames(TRACE) == [
        TRACE[0],
        TRACE[1],
        "        [50 stack frames]",
        "Caused by: java.io.InvalidClassException: local class incompatible",
        "        [2 stack frames]",
        TRACE[-1],
    ]


def test_a_log_without_frames_is_unchanged() -> None:
    lines = ["one", "  indented but no frame", "two"]
    assert fold_stack_frames(lines) == lines
    assert fold_stack_frames([]) == []


def test_the_tail_shows_the_error_above_a_long_trace(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("\n".join(TRACE) + "\n")
    managed = Managed(name="S", argv=["true"], env={}, log_path=log)
    tail = managed.tail(5).splitlines()
    assert tail[0].endswith("lost task") and "Caused by" in tail[2], tail
    assert managed.tail(30).splitlines()[0] == TRACE[0]


def test_a_missing_log_has_an_empty_tail(tmp_path: Path) -> None:
    assert Managed(name="S", argv=["true"], env={}, log_path=tmp_path / "none.log").tail() == ""
