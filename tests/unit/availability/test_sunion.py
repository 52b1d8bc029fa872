"""SUnion's bucket rules: stable release on boundaries, tentative after the delay budget."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.availability import DelayStrategy, Kind, Message, Row, SUnion


def union(strategy: DelayStrategy = DelayStrategy.DELAY_EACH, budget: int = 900) -> SUnion:
    return SUnion(["a", "b"], bucket_ms=100, delay_budget_ms=budget, strategy=strategy)


def row(stime: int, tid: str) -> Message:
    return Message.stable(Row(stime, tid, ("k", 1)))


def test_bucket_released_stable_only_when_every_boundary_passed() -> None:
    s = union()
    s.receive("a", row(10, "a1"))
    s.receive("b", row(50, "b1"))
    s.receive("a", Message.boundary(100))
    assert s.release(100, in_failure=False) is None
    s.receive("b", Message.boundary(99))
    assert s.release(100, in_failure=False) is None
    s.receive("b", Message.boundary(100))
    bucket = s.release(100, in_failure=False)
    assert bucket is not None and bucket.stable and bucket.number == 0
    assert [r.tid for r in bucket.rows] == ["a1", "b1"]
    assert s.next_bucket == 1


def test_rows_are_merged_in_stime_then_tid_order_and_deduplicated() -> None:
    s = union()
    for stime, tid in [(70, "b2"), (20, "a2"), (20, "a1"), (70, "b2")]:
        s.receive("a" if tid.startswith("a") else "b", row(stime, tid))
    s.receive("a", Message.boundary(100))
    s.receive("b", Message.boundary(100))
    bucket = s.release(0, in_failure=False)
    assert bucket is not None
    assert [(r.stime, r.tid) for r in bucket.rows] == [(20, "a1"), (20, "a2"), (70, "b2")]


def test_missing_input_gives_a_tentative_bucket_after_the_budget() -> None:
    s = union(budget=900)
    s.receive("a", row(10, "a1"))
    s.receive("a", Message.boundary(300))
    # Bucket 0 is due at its end (100); the budget runs to 1000.
    assert s.release(999, in_failure=False) is None
    bucket = s.release(1000, in_failure=False)
    assert bucket is not None and not bucket.stable and bucket.number == 0
    assert [r.tid for r in bucket.rows] == ["a1"]


def test_no_tentative_release_without_any_available_input() -> None:
    s = union(budget=0)
    assert s.release(10_000, in_failure=True) is None


def test_delay_each_waits_the_budget_for_every_bucket() -> None:
    s = union(DelayStrategy.DELAY_EACH, budget=500)
    s.receive("a", Message.boundary(1000))
    assert s.release(600, in_failure=False) is not None  # bucket 0: due 100 + 500
    assert s.release(600, in_failure=True) is None  # bucket 1: due 200 + 500
    assert s.release(700, in_failure=True) is not None


def test_delay_first_processes_later_buckets_without_delay() -> None:
    s = union(DelayStrategy.DELAY_FIRST, budget=500)
    s.receive("a", Message.boundary(1000))
    assert s.release(600, in_failure=False) is not None
    released = []
    while (bucket := s.release(1000, in_failure=True)) is not None:
        released.append(bucket.number)
    # Every due bucket that input "a" passed goes at once (a DELAY_EACH union would hold
    # buckets 5-9 until 1100-1500); bucket 10 is not passed by anyone yet.
    assert released == list(range(1, 10))


def test_tentative_rows_block_stable_release_until_undone() -> None:
    s = union()
    s.receive("a", Message.boundary(100))
    s.receive("b", Message.tentative(Row(30, "b9", ("k", 1))))
    s.receive("b", Message.boundary(100))
    assert not s.stable_ready(0)
    s.receive("b", Message(Kind.UNDO))
    assert s.stable_ready(0)


def test_stable_row_replaces_its_tentative_version() -> None:
    s = union()
    s.receive("b", Message.tentative(Row(30, "b9", ("k", 1))))
    s.receive("b", row(30, "b9"))
    s.receive("a", Message.boundary(100))
    s.receive("b", Message.boundary(100))
    assert s.stable_ready(0)
    assert len(s.bucket(0, stable=True).rows) == 1


def test_trim_forgets_rows_below_the_checkpoint() -> None:
    s = union()
    s.receive("a", row(10, "a1"))
    s.receive("a", row(150, "a2"))
    s.trim(1)
    assert s.bucket(0, stable=True).rows == ()
    assert len(s.bucket(1, stable=True).rows) == 1


def test_bad_configuration_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="bucket_ms"):
        SUnion(["a"], bucket_ms=0, delay_budget_ms=1)
    with pytest.raises(ValueError, match="distinct"):
        SUnion(["a", "a"], bucket_ms=10, delay_budget_ms=1)
    with pytest.raises(KeyError, match="unknown input 'z'"):
        SUnion(["a"], bucket_ms=10, delay_budget_ms=1).receive("z", Message.boundary(5))


@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 999)), max_size=60),
    st.randoms(use_true_random=False),
)
def test_stable_buckets_hold_exactly_their_rows_in_any_arrival_order(rows, rnd) -> None:
    """Whatever order rows and boundaries arrive in (a boundary only after its input's rows
    below it), the stable buckets are released in order and each holds exactly its rows."""
    messages = {
        name: [
            Message.stable(Row(t, f"{name}{i}", ("k", 1)))
            for i, (n, t) in enumerate(rows)
            if n == name
        ]
        for name in ("a", "b")
    }
    for name in messages:
        messages[name].sort(key=lambda m: m.stime)
        messages[name].append(Message.boundary(1000))
    s = union()
    released = []
    queues = {name: list(ms) for name, ms in messages.items()}
    while any(queues.values()):
        name = rnd.choice([n for n, q in queues.items() if q])
        s.receive(name, queues[name].pop(0))
        while (bucket := s.release(0, in_failure=False)) is not None:
            assert bucket.stable
            released.append(bucket)
    assert [b.number for b in released] == list(range(10))
    for bucket in released:
        expected = sorted(
            m.row
            for ms in messages.values()
            for m in ms
            if m.row is not None and m.row.stime // 100 == bucket.number
        )
        assert list(bucket.rows) == expected
