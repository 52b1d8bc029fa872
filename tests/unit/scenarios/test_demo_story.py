"""When the demo may end early (``end_when_settled``): only once its story is told."""

from __future__ import annotations

from pathlib import Path

from app.federation.document import load_federation
from app.participant.node import MoveEvent
from spark_jobs.scenarios.demo import DemoOptions, _told, run_over

DOC = load_federation(Path("contracts/borealis-demo.yaml"))


def move(src: str, dst: str, state_bytes: int = 0) -> MoveEvent:
    return MoveEvent(0.0, f"{src}.t", src, dst, 0.25, "load", 1, state_bytes)


def test_two_stateful_moves_and_a_move_into_the_late_joiner_tell_the_story() -> None:
    stateful = [move("A", "B", 20_000), move("A", "C", 20_000)]
    assert not _told(DOC, stateful), "D joined to take load and has taken none"
    assert not _told(DOC, [stateful[0], move("C", "D")]), "one stateful move is not two"
    assert _told(DOC, [*stateful, move("C", "D")])


def test_the_run_ends_once_settled_or_when_the_overtime_runs_out() -> None:
    options = DemoOptions(overtime=60.0)  # make demo: the whole timeline plays
    assert not run_over(150.0, 189.0, 100.0, options), "settled early: the timeline still plays"
    assert run_over(190.0, 189.0, 100.0, options), "past the timeline and settled"
    assert not run_over(200.0, 189.0, None, options), "not settled: overtime"
    assert run_over(249.5, 189.0, None, options), "the overtime has run out"


def test_a_test_run_ends_once_settled_for_its_hold_within_or_past_the_timeline() -> None:
    options = DemoOptions(end_when_settled=10.0, overtime=120.0)
    assert not run_over(105.0, 189.0, 100.0, options)
    assert run_over(110.0, 189.0, 100.0, options)
    assert not run_over(195.0, 189.0, 190.0, options), "settled past the timeline: hold it 10 s"
    assert run_over(200.0, 189.0, 190.0, options)
