"""A warm copy's catch-up fits in the prepared movement's lease (spark_jobs.runtime.warm)."""

from __future__ import annotations

import math

import pytest

from spark_jobs.runtime.warm import LEASE_RESERVE_FRACTION, LEASE_RESERVE_MIN_S, lease_deadline


def test_no_lease_said_no_bound() -> None:
    assert lease_deadline(100.0, None) == math.inf


def test_a_fraction_of_the_lease_is_kept_for_release_ship_commit_and_fallback() -> None:
    # 60 s left: 30% (18 s) kept, so the copy must have caught up 42 s after the read.
    assert lease_deadline(100.0, 60.0) == pytest.approx(100.0 + 60.0 * (1 - LEASE_RESERVE_FRACTION))


def test_a_short_lease_keeps_at_least_the_minimum_reserve() -> None:
    assert lease_deadline(100.0, 10.0) == pytest.approx(100.0 + 10.0 - LEASE_RESERVE_MIN_S)
    # Nearly gone: the deadline is already past, so the agent moves by stop-and-copy at once.
    assert lease_deadline(100.0, 2.0) < 100.0
