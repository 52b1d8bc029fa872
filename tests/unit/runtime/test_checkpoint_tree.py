"""Checkpoint trees and their deltas: what passive standby ships after the first shipment."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.runtime.checkpoint_tree import (
    DeltaMismatch,
    Tree,
    TreeDelta,
    apply,
    diff,
    digest,
    pack_tree,
    read_tree,
    unpack_tree,
)
from spark_jobs.runtime.host import pack_directory, unpack_directory
from spark_jobs.runtime.transport import PackedCheckpoint
from tests.support.checkpoints import spark_like

names = st.sampled_from(
    ["commits/0", "commits/1", "offsets/0", "offsets/1", "metadata", "state/0/0/1.delta", "x"]
)
contents = st.one_of(st.none(), st.binary(max_size=64))
trees = st.dictionaries(names, contents, max_size=7)


@settings(max_examples=200, deadline=None)
@given(trees, trees)
def test_a_delta_turns_its_base_into_the_new_tree(base: Tree, new: Tree) -> None:
    delta = diff(base, new)
    assert apply(base, delta) == new
    # What goes over the wire decodes to the same delta.
    assert apply(base, TreeDelta.decode(delta.encoded)) == new


@settings(max_examples=100, deadline=None)
@given(trees, trees)
def test_a_delta_applies_only_to_the_tree_it_was_computed_against(base: Tree, new: Tree) -> None:
    other = {**base, "elsewhere": b"a copy that drifted"}
    with pytest.raises(DeltaMismatch, match="computed against"):
        apply(other, diff(base, new))


def test_a_delta_whose_result_differs_from_the_senders_tree_is_refused() -> None:
    base: Tree = {"commits/0": b"a"}
    delta = diff(base, {"commits/0": b"a", "commits/1": b"b"})
    tampered = TreeDelta(delta.base, delta.result, {"commits/1": b"c"}, delta.removed)
    with pytest.raises(DeltaMismatch, match="gives"):
        apply(base, tampered)


def test_a_new_empty_file_and_a_file_becoming_a_directory_are_carried() -> None:
    base: Tree = {"a": b"1", "b": b"2"}
    new: Tree = {"a": None, "b": b"2", "empty": b""}
    delta = diff(base, new)
    assert delta.changed == {"a": None, "empty": b""} and delta.removed == ()
    assert apply(base, delta) == new


def test_pack_is_deterministic_and_restores_as_a_directory(tmp_path: Path) -> None:
    spark_like(tmp_path / "cp", 3)
    tree = read_tree(tmp_path / "cp")
    assert tree["sources/0"] is None and tree["offsets/2"] == b'v1\n{}\n{"bucket":12}'
    packed = pack_tree(tree)
    assert pack_tree(unpack_tree(packed)) == packed
    # The pack is what a move restores: the directory comes back whole, empty ones included.
    unpack_directory(PackedCheckpoint.of(packed), tmp_path / "restored")
    assert read_tree(tmp_path / "restored") == tree
    # And a pack of the directory itself reads as the same tree.
    assert unpack_tree(pack_directory(tmp_path / "cp").data) == tree


def test_reading_lists_commits_before_offsets_and_state(tmp_path: Path) -> None:
    spark_like(tmp_path, 2)
    order = list(read_tree(tmp_path))
    first = {
        prefix: next(i for i, n in enumerate(order) if n.startswith(prefix))
        for prefix in ("commits/", "offsets/", "state/")
    }
    assert first["commits/"] < first["offsets/"] < first["state/"]


def test_a_period_of_spark_like_work_ships_a_small_fraction_of_the_checkpoint(
    tmp_path: Path,
) -> None:
    spark_like(tmp_path, 100)
    before = read_tree(tmp_path)
    spark_like(tmp_path, 102)  # two more batches
    (tmp_path / "state/0/0/1.delta").unlink()  # maintenance drops the oldest version
    after = read_tree(tmp_path)
    delta = diff(before, after)
    assert set(delta.changed) == {
        "commits/100",
        "commits/101",
        "offsets/100",
        "offsets/101",
        "state/0/0/101.delta",
        "state/0/0/102.delta",
    }
    assert delta.removed == ("state/0/0/1.delta",)
    assert len(delta.encoded) * 10 < len(pack_tree(after))


def test_something_that_is_not_a_delta_is_refused_by_name() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass
    with pytest.raises(DeltaMismatch, match="not a checkpoint delta"):
        TreeDelta.decode(buffer.getvalue())


def test_the_digest_tells_an_empty_file_from_a_directory() -> None:
    assert digest({"a": b""}) != digest({"a": None})
