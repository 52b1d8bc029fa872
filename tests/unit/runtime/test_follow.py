"""A warm copy's follow file: its Spark runs exactly the source's batches, then plans its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.runtime import follow
from spark_jobs.runtime.warm import batch_log, log_tree

# The source's offset log: batch id -> end bucket. Batch 3 is a no-data batch (end = start).
SOURCE = {0: 10, 1: 11, 2: 12, 3: 12, 4: 14}


def _log(offsets: Path, batches: range) -> None:
    offsets.mkdir(parents=True, exist_ok=True)
    for batch in batches:
        (offsets / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{{"bucket":{SOURCE[batch]}}}'
        )


@pytest.fixture
def copy(tmp_path: Path) -> tuple[Path, Path]:
    offsets = tmp_path / "checkpoint" / "offsets"
    _log(offsets, range(2))  # the snapshot: batches 0 and 1
    return tmp_path / "follow" / "O.x.json", offsets


def test_the_copy_runs_the_source_batch_of_the_id_it_is_about_to_log(copy):
    path, offsets = copy
    follow.write(path, offsets, SOURCE)
    assert follow.planned_end(str(path), 11) == 12
    _log(offsets, range(3))
    # The source's no-data batch: "no new data", so the copy's Spark runs one too.
    assert follow.planned_end(str(path), 12) == 12
    _log(offsets, range(4))
    assert follow.planned_end(str(path), 12) == 14


def test_a_batch_the_source_has_not_logged_is_waited_for_then_answered_no_new_data(copy):
    path, offsets = copy
    follow.write(path, offsets, {0: 10, 1: 11})
    assert follow.planned_end(str(path), 11, wait_s=0.05) == 11


def test_a_copy_that_is_not_where_the_source_was_gets_no_batch(copy):
    path, offsets = copy
    follow.write(path, offsets, SOURCE)
    # Batch 2 starts after batch 1's end, 11, at the source: a copy standing at 13 diverged.
    assert follow.planned_end(str(path), 13) == 13


def test_leading_plans_after_the_source_s_last_batch_and_not_before(copy):
    path, offsets = copy
    follow.write(path, offsets, SOURCE, hold="O.x.warm-7")
    assert follow.lead(path)
    assert follow.planned_end(str(path), 11) == 12  # still the source's batch 2
    _log(offsets, range(5))
    assert follow.planned_end(str(path), 14) is None  # past batch 4: its own
    assert follow.hold(path) == "O.x.warm-7"


def test_without_a_follow_file_the_query_plans_for_itself(tmp_path: Path):
    missing = tmp_path / "none.json"
    assert follow.planned_end(str(missing), 5) is None
    assert not follow.lead(missing)
    assert follow.hold(missing) is None


def test_the_offset_log_is_read_by_batch_id(copy, tmp_path: Path):
    _, offsets = copy
    commits = offsets.parent / "commits"
    commits.mkdir()
    (commits / "0").write_text("v1\n{}")
    (offsets / ".1.tmp").write_text("partial")  # Spark's temporary files are not batches
    ends, committed = batch_log(log_tree(offsets.parent))
    assert ends == {0: 10, 1: 11}
    assert committed == {0}
