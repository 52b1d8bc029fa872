"""Delta checkpoints: applying the diff of two snapshots gives the newer one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.availability import WindowCount
from app.availability.delta import apply, diff
from app.availability.simulation import source_rows

leaf = st.one_of(st.integers(), st.lists(st.integers(), max_size=3), st.text(max_size=3))
states = st.recursive(
    st.dictionaries(st.text(max_size=3), leaf, max_size=5),
    lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=20,
)


@given(states, states)
def test_apply_of_diff_gives_the_new_state(old, new) -> None:
    patch = diff(old, new)
    assert apply(old, patch) == new
    assert json.loads(json.dumps(patch)) == patch
    assert diff(new, new) == {}


def test_a_window_count_delta_is_much_smaller_than_its_state() -> None:
    op = WindowCount(60_000, 250)
    rows = source_rows("a", rate_per_second=2000, duration_ms=5000, keys=2000)
    for bucket in range(19):
        op.process(bucket, [r for r in rows if r.stime // 250 == bucket])
    before = op.snapshot()
    op.process(19, [r for r in rows if r.stime // 250 == 19])
    after = op.snapshot()
    patch = diff(before, after)
    assert apply(before, patch) == after
    assert len(json.dumps(patch)) < len(json.dumps(after)) / 3


def test_patching_a_non_dict_is_refused() -> None:
    with pytest.raises(ValueError, match="'w'"):
        apply({"w": 1}, {"sub": {"w": {"set": {"k": 1}}}})
