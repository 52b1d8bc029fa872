"""A runtime's pace and alternates directories go with it: close() removes what it made there.

They sit beside the checkpoint root (``<root>.pace``, ``<root>.alternates``), so a runtime on a
temporary root (a scenario's reference run) used to leave both in /tmp for good. No Spark here:
a runtime builds its session only when a query starts, and these files are written by the agent
(the warm source's pace, ``_launch``'s alternates) through the paths the runtime hands out.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.runtime import FragmentRuntime, StreamRef, pace
from spark_jobs.runtime.host import _write_alternates

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _no_spark() -> SparkSession:
    raise AssertionError("these tests start no query")


def _runtime(root: Path) -> FragmentRuntime:
    return FragmentRuntime("H", _no_spark, root)


def _write_both(runtime: FragmentRuntime, fragment: str) -> None:
    """What a running fragment leaves: its alternates listed, a warm copy's pace."""
    primary = StreamRef("grpc://127.0.0.1:1", "in", (StreamRef("grpc://127.0.0.1:2", "in"),))
    _write_alternates(runtime.alternates_file(fragment), [primary])
    pace.write(runtime.pace_file(fragment), runtime.checkpoint_dir(fragment) / "offsets", 3)


def _siblings(root: Path) -> list[str]:
    return sorted(p.name for p in root.parent.iterdir() if p.name.startswith(f"{root.name}."))


def test_close_removes_the_directories_it_made_and_keeps_the_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "H"
    runtime = _runtime(root)
    _write_both(runtime, "A.frag")
    _write_both(runtime, "A.other")
    (runtime.checkpoint_dir("A.frag") / "offsets").mkdir(parents=True)
    assert _siblings(root) == ["H.alternates", "H.pace"]
    assert runtime.alternates_file("A.frag").is_file() and runtime.pace_file("A.frag").is_file()

    runtime.close()

    assert _siblings(root) == []
    # The checkpoint root is the agent's: a restarted agent resumes from it.
    assert (root / "A.frag" / "offsets").is_dir()


def test_close_leaves_what_it_did_not_make(tmp_path: Path) -> None:
    root = tmp_path / "H"
    # Another runtime on the same root's directories (or a crashed run's) were there first.
    (tmp_path / "H.alternates").mkdir()
    (tmp_path / "H.alternates" / "B.frag.json").write_text("{}")
    runtime = _runtime(root)
    _write_both(runtime, "A.frag")

    runtime.close()

    # Its own files went, and the directory left empty; the other's file and its directory stay.
    assert _siblings(root) == ["H.alternates"]
    assert sorted(p.name for p in (tmp_path / "H.alternates").iterdir()) == ["B.frag.json"]


def test_a_runtime_that_ran_nothing_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "H"
    runtime = _runtime(root)
    runtime.close()
    assert _siblings(root) == []
