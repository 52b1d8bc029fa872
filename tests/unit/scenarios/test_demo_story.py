"""When the demo may end early (``end_when_settled``): only once its story is told."""

from __future__ import annotations

from pathlib import Path

from app.federation.document import load_federation
from app.participant.node import MoveEvent
from spark_jobs.scenarios.demo import _told

DOC = load_federation(Path("contracts/borealis-demo.yaml"))


def move(src: str, dst: str, state_bytes: int = 0) -> MoveEvent:
    return MoveEvent(0.0, f"{src}.t", src, dst, 0.25, "load", 1, state_bytes)


def test_two_stateful_moves_and_a_move_into_the_late_joiner_tell_the_story() -> None:
    stateful = [move("A", "B", 20_000), move("A", "C", 20_000)]
    assert not _told(DOC, stateful), "D joined to take load and has taken none"
    assert not _told(DOC, [stateful[0], move("C", "D")]), "one stateful move is not two"
    assert _told(DOC, [*stateful, move("C", "D")])
