"""The load window: CPU seconds per wall second over the last seconds, never from too little."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.runtime.cpu_load import CpuWindow


def test_a_steady_half_core_reads_half_a_core():
    window = CpuWindow(window=10.0, min_span=3.0)
    for second in range(30):
        window.add(float(second), 0.5)
    assert window.cores() == pytest.approx(0.5)


def test_too_short_a_span_says_nothing_rather_than_a_start_up_burst():
    window = CpuWindow(window=10.0, min_span=3.0)
    window.add(0.0, 0.0)
    window.add(1.0, 2.0)  # the first batch of a query that just moved here
    assert window.cores() is None
    window.add(3.0, 0.2)
    assert window.cores() == pytest.approx(2.2 / 3.0)


def test_only_the_last_window_counts():
    window = CpuWindow(window=10.0, min_span=3.0)
    for second in range(20):
        window.add(float(second), 1.0 if second < 10 else 0.1)
    # Samples 10..19 (and 9, the window's start) span 10 s with 0.1 s of CPU a second.
    assert window.cores() == pytest.approx(0.1)


def test_cpu_time_cannot_go_back():
    with pytest.raises(ValueError, match="cannot go back"):
        CpuWindow().add(0.0, -1.0)


@given(st.lists(st.floats(min_value=0, max_value=4, allow_nan=False), min_size=5, max_size=60))
def test_the_rate_is_what_was_spent_over_the_span(spent):
    window = CpuWindow(window=1000.0, min_span=1.0)
    for second, cpu in enumerate(spent):
        window.add(float(second), cpu)
    # The first sample opens the span: what it carried was spent before it.
    expected = sum(spent[1:]) / (len(spent) - 1)
    assert window.cores() == pytest.approx(expected)
