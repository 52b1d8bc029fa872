"""A scenario's waits are recorded for its report (``spark_jobs.scenarios.harness``): what was
waited for, how long, and whether it ran out, so a condition that never holds shows up as a
spent timeout instead of minutes nobody can account for."""

from __future__ import annotations

import itertools

import pytest

from spark_jobs.scenarios.harness import recording_waits, wait_until, waits_so_far


def test_each_wait_is_recorded_with_its_outcome() -> None:
    answers = itertools.chain([0, None], itertools.repeat("ready"))
    with recording_waits() as waits:
        assert wait_until("a condition that comes true", lambda: next(answers), 5, every=0.01)
        with pytest.raises(TimeoutError, match="a condition that never holds"):
            wait_until("a condition that never holds", lambda: False, 0.05, every=0.01)
        assert waits_so_far() == waits
    assert [(w["what"], w["outcome"]) for w in waits] == [
        ("a condition that comes true", "met"),
        ("a condition that never holds", "timed out"),
    ]
    assert waits[1]["seconds"] >= 0.0


def test_a_wait_stopped_by_an_exception_is_recorded_as_interrupted() -> None:
    def check() -> bool:
        raise KeyboardInterrupt

    with recording_waits() as waits, pytest.raises(KeyboardInterrupt):
        wait_until("a wait someone stopped", check, 5, every=0.01)
    assert [(w["what"], w["outcome"]) for w in waits] == [("a wait someone stopped", "interrupted")]


def test_an_error_in_the_check_counts_as_not_yet_and_outside_a_recording_nothing_is_kept() -> None:
    calls = iter([RuntimeError("agent still starting"), True])

    def check() -> bool:
        answer = next(calls)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_until("an agent", check, 5, every=0.01) is True
    assert waits_so_far() == []


def test_recordings_nest_and_the_outer_one_resumes() -> None:
    with recording_waits() as outer:
        wait_until("outer first", lambda: True, 1)
        with recording_waits() as inner:
            wait_until("inner", lambda: True, 1)
        wait_until("outer second", lambda: True, 1)
    assert [w["what"] for w in inner] == ["inner"]
    assert [w["what"] for w in outer] == ["outer first", "outer second"]
