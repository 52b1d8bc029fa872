"""A fragment's trigger interval, a generator whose rate rises mid-run, and the stored form of a
generator source read back as it was written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.work.errors import FragmentError
from app.work.spec import Work, interval_seconds, parse_work
from spark_jobs.runtime.own_work import DEFAULT_TRIGGER_SECONDS, trigger_seconds
from spark_jobs.runtime.participant_host import generator_of


def test_a_fragment_runs_its_batches_at_its_trigger_or_at_the_default() -> None:
    work = parse_work({"sql": "SELECT 1", "trigger": "2 seconds"}, distributions={})
    assert work.to_json()["trigger"] == "2 seconds"
    assert trigger_seconds(work.to_json()) == 2.0
    assert trigger_seconds(parse_work({"sql": "SELECT 1"}, distributions={}).to_json()) == 0.5
    assert trigger_seconds({}) == DEFAULT_TRIGGER_SECONDS  # a catalogue fragment has no work


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"sql": "SELECT 1", "trigger": "soon"}, "is not an interval"),
        ({"sql": "SELECT 1", "trigger": "2 hours"}, "between 0.1 and 60 seconds"),
        ({"sql": "SELECT 1", "trigger": "10 milliseconds"}, "between 0.1 and 60 seconds"),
        ({"source": {"kind": "generator"}, "trigger": "2 seconds"}, "for a fragment"),
    ],
)
def test_a_bad_trigger_is_refused_at_its_field(raw: dict, words: str) -> None:
    with pytest.raises(FragmentError) as refused:
        parse_work(raw, distributions={})
    assert refused.value.path[-1] == "trigger"
    assert words in refused.value.detail


@given(st.integers(min_value=1, max_value=59), st.sampled_from(["second", "seconds"]))
def test_an_interval_in_seconds_is_its_number(number: int, unit: str) -> None:
    assert interval_seconds(f"{number} {unit}") == float(number)
    assert interval_seconds(f"{number * 1000} milliseconds") == float(number)


def test_a_generator_source_reads_back_from_its_stored_form() -> None:
    """The stored work writes the generator's schema out; an agent parses it back. A schema of
    one's own stays refused."""
    stored = parse_work({"source": {"kind": "generator", "seed": 3}}, distributions={}).to_json()
    assert "schema" in stored["source"]
    assert Work.from_json(stored).source is not None
    with pytest.raises(FragmentError, match="schema is its own"):
        parse_work(
            {"source": {"kind": "generator", "schema": "a INT", "event_time": "a"}},
            distributions={},
        )


def test_a_generator_rate_rises_from_its_second_and_regenerates_the_same_rows() -> None:
    steady = generator_of({"seed": 5, "rate": 50})
    rising = generator_of({"seed": 5, "rate": 50, "rate_after": 200, "rate_from": 10})
    assert rising.second(9).equals(steady.second(9)), "before the rise, the same rows"
    before = sum(rising.second(s).num_rows for s in range(0, 10))
    after = sum(rising.second(s).num_rows for s in range(10, 20))
    # 50 then 200 connections a second (Poisson), beside the scanners' probes, which do not rise.
    probes = 10 * int(steady.scan_rate) * steady.scanners
    assert 3.5 < (after - probes) / (before - probes) < 4.5
    again = generator_of({"seed": 5, "rate": 50, "rate_after": 200, "rate_from": 10})
    assert again.seconds(0, 20).equals(rising.seconds(0, 20))
