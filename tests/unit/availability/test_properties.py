"""Hypothesis properties of DPC over whole runs (app.availability.simulation).

The central one (DESIGN.md invariant 5): whatever links fail and heal, in whatever order, once
everything has healed the consumer's stable output equals the failure-free output, with no
tentative row left, and replicas of the fragment never reconcile at the same time.
"""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.availability import DelayStrategy, WindowCount
from app.availability.simulation import Outage, SimResult, added_latency_ms, simulate, source_rows

BUCKET = 100
BUDGET = 300
TICK = 50
DURATION = 3000
LINKS = ["s1", "s2", "s1->B", "s2->B", "s1->R", "s2->R", "B->out", "R->out"]


@cache
def sources() -> dict:
    return {
        "s1": tuple(source_rows("a", rate_per_second=40, duration_ms=DURATION, keys=4)),
        "s2": tuple(source_rows("b", rate_per_second=40, duration_ms=DURATION, keys=4)),
    }


def run(**options) -> SimResult:
    return simulate(
        sources={k: list(v) for k, v in sources().items()},
        make_operator=lambda: WindowCount(400, BUCKET),
        bucket_ms=BUCKET,
        delay_budget_ms=BUDGET,
        tick_ms=TICK,
        settle_ms=2000,
        **options,
    )


@cache
def reference() -> SimResult:
    return run()


outages = st.lists(
    st.builds(
        lambda link, start, length: Outage(link, start, start + length),
        st.sampled_from(LINKS),
        st.integers(0, DURATION),
        st.integers(1, 1500),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outages,
    st.sampled_from(list(DelayStrategy)),
    st.sampled_from([("N",), ("B", "R")]),
    st.sampled_from([None, 1, 3]),
)
def test_stable_output_after_healing_equals_failure_free(
    schedule, strategy, replicas, replay_per_tick
) -> None:
    # Links of replicas that do not exist in this run are simply never used.
    result = run(
        outages=schedule, strategy=strategy, replicas=replicas, replay_per_tick=replay_per_tick
    )
    assert result.stable == reference().stable
    assert result.view.tentative == []
    assert result.view.duplicates == 0
    assert result.max_concurrent_stabilizing <= 1
    assert all(state.value == "STABLE" for state in result.states.values())


@settings(max_examples=40, deadline=None)
@given(st.integers(0, DURATION), st.integers(1, BUDGET - 1), st.sampled_from(list(DelayStrategy)))
def test_failure_shorter_than_the_budget_costs_no_tentative_rows(start, length, strategy) -> None:
    result = run(outages=[Outage("s2", start, start + length)], strategy=strategy)
    assert result.tentative_rows == 0
    assert result.stable == reference().stable


@settings(max_examples=40, deadline=None)
@given(st.integers(0, DURATION), st.integers(1, 2500), st.sampled_from(list(DelayStrategy)))
def test_added_latency_stays_within_the_budget_while_input_is_available(
    start, length, strategy
) -> None:
    result = run(outages=[Outage("s2", start, start + length)], strategy=strategy)
    latency = added_latency_ms(result, reference())
    assert latency, "no output row was compared"
    assert max(latency.values()) <= BUDGET + TICK
