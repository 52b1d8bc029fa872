"""A warm copy far behind the source catches up in one batch of its own (a jump), then mirrors the
source batch by batch; which of its batches stand for which of the source's is kept, so that the
output log keeps every batch once whichever host runs it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs.runtime import follow
from spark_jobs.runtime.soutput import Mirror, SOutput, read_mirror, write_mirror
from spark_jobs.runtime.warm import JUMP_MIN_BEHIND, WarmCopy, WarmSink

SNAPSHOT = 10
# The source's offset log: batch id -> end bucket, one bucket a batch; 17 is a no-data batch.
SOURCE = {batch: 100 + batch for batch in range(0, 17)} | {17: 116, 18: 118, 19: 119}


class Checkpoints:
    """The part of a FragmentRuntime a copy's bookkeeping reads: its checkpoint directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def checkpoint_dir(self, fragment: str) -> Path:
        return self.root / fragment

    def log(self, fragment: str, batch: int, end: int, *, committed: bool = True) -> None:
        directory = self.checkpoint_dir(fragment)
        (directory / "offsets").mkdir(parents=True, exist_ok=True)
        (directory / "commits").mkdir(parents=True, exist_ok=True)
        (directory / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{{"bucket":{end}}}'
        )
        if committed:
            (directory / "commits" / str(batch)).write_text("v1\n{}")


@pytest.fixture
def copy(tmp_path: Path) -> tuple[WarmCopy, Checkpoints]:
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    for batch in range(SNAPSHOT + 1):  # the snapshot: the source's batches up to 10
        checkpoints.log("O.x", batch, SOURCE[batch])
    warm = WarmCopy(
        spec=SimpleNamespace(name="O.x"),  # type: ignore[arg-type]
        source=None,  # type: ignore[arg-type]
        runtime=checkpoints,  # type: ignore[arg-type]
        move=SimpleNamespace(movement_id=7, epoch=3),  # type: ignore[arg-type]
        follow_path=tmp_path / "follow" / "O.x.json",
        snapshot_batch=SNAPSHOT,
    )
    return warm, checkpoints


def _offered(warm: WarmCopy) -> dict[int, int]:
    body: dict[str, Any] = json.loads(warm.follow_path.read_text())
    return {int(batch): int(end) for batch, end in body["ends"].items()}


def _source(upto: int) -> dict[int, int]:
    return {batch: end for batch, end in SOURCE.items() if batch <= upto}


def test_a_copy_close_behind_is_offered_the_source_s_next_batch_only(copy):
    warm, checkpoints = copy
    warm._offer(_source(SNAPSHOT + JUMP_MIN_BEHIND), SNAPSHOT + JUMP_MIN_BEHIND)
    assert _offered(warm) == {11: SOURCE[11]}
    # Once it has planned 11, the next one, and no further (it could not be taken back).
    checkpoints.log("O.x", 11, SOURCE[11], committed=False)
    warm._offer(_source(SNAPSHOT + JUMP_MIN_BEHIND), SNAPSHOT + JUMP_MIN_BEHIND)
    assert _offered(warm) == {11: SOURCE[11], 12: SOURCE[12]}
    assert warm.segments == []
    assert warm.mirror() is None


def test_a_copy_far_behind_jumps_to_the_source_s_second_to_last_batch(copy):
    warm, _ = copy
    warm._offer(_source(15), 15)
    # Its batch 11 runs the source's 11..14 at once, its 12 is the source's 15.
    assert _offered(warm) == {11: SOURCE[14], 12: SOURCE[15]}
    assert [warm.source_id(b) for b in (10, 11, 12, 13)] == [10, 14, 15, 16]
    # The copy's last batch standing for a source batch at or below each source id.
    assert [warm.copy_id(s) for s in (10, 11, 13, 14, 15, 16)] == [10, 10, 10, 11, 12, 13]


def test_a_jump_ends_at_the_source_s_last_committed_batch_not_one_only_logged(copy):
    warm, _ = copy
    # The source logged 15 but has committed (so written) only up to 14: a source released now
    # never writes 15, and a copy batch standing for 15 after a jump would write the windows
    # of every batch the jump covered under an id the output log has not seen.
    warm._offer(_source(15), 14)
    assert _offered(warm) == {11: SOURCE[13], 12: SOURCE[14]}
    assert warm.segments == [(11, 2)]
    # At the release, the rest follows batch by batch (the copy's state is the source's again).
    warm._offer(_source(15), 14, final=True)
    assert _offered(warm) == {11: SOURCE[13], 12: SOURCE[14], 13: SOURCE[15]}
    mirror = warm.mirror()
    assert mirror is not None and mirror.upto == 13 and mirror.source_id(13) == 15


def test_the_copy_s_sink_forgets_a_higher_mapping_a_jump_replaced(copy):
    warm, checkpoints = copy
    warm.sink = WarmSink("grpc://unused", "O.x.out", 3)
    ends = {batch: 100 + batch for batch in range(30)}
    below = {batch: end for batch, end in ends.items() if batch <= 16}
    warm._offer(below, 16)  # copy 11 = the source's 15, copy 12 = 16
    assert warm.segments == [(11, 4)]
    for batch in (11, 12, 13):
        checkpoints.log("O.x", batch, ends[warm.source_id(batch)])
    warm.sink.source_at(warm.copy_id(22))  # the source committed 22: the copy's 18
    assert warm.sink.source_committed == 18
    warm._offer(ends, 22)  # copy 14 = the source's 18 is behind by 4: copy 14 = 21, 15 = 22
    assert warm.segments == [(11, 4), (14, 7)]
    warm.sink.source_at(warm.copy_id(22))
    # Not 18 (the most seen): the copy's 16..18 are batches the source never ran, its own.
    assert warm.sink.source_committed == 15


def test_a_copy_left_behind_by_its_cold_first_batch_jumps_next(copy):
    warm, checkpoints = copy
    warm._offer(_source(11), 11)
    assert _offered(warm) == {11: SOURCE[11]}
    # The copy plans 11 (its first, cold batch) while the source runs ahead to 17.
    checkpoints.log("O.x", 11, SOURCE[11], committed=False)
    warm._offer(_source(17), 17)
    assert _offered(warm) == {11: SOURCE[11], 12: SOURCE[16], 13: SOURCE[17]}
    assert warm.segments == [(12, 4)]
    # Then batch by batch, the source's no-data batch 17 included (same end as 16).
    checkpoints.log("O.x", 12, SOURCE[16])
    checkpoints.log("O.x", 13, SOURCE[17], committed=False)
    warm._offer(_source(18), 18)
    assert _offered(warm)[14] == SOURCE[18]
    mirror = warm.mirror()
    assert mirror is not None and mirror.upto == 14 and mirror.source_id(14) == 18
    assert SOURCE[17] == SOURCE[16]


def test_after_the_release_the_copy_is_offered_everything(copy):
    warm, checkpoints = copy
    warm._offer(_source(11), 11)
    checkpoints.log("O.x", 11, SOURCE[11], committed=False)
    warm._offer(_source(13), 13, final=True)
    assert _offered(warm) == {b: SOURCE[b] for b in range(11, 14)}
    assert warm.mirror() is None


def test_the_follow_file_answers_the_jump_by_the_copy_s_own_batch_ids(copy):
    warm, checkpoints = copy
    warm._offer(_source(15), 15)
    path = str(warm.follow_path)
    assert follow.planned_end(path, SOURCE[SNAPSHOT], wait_s=0) == SOURCE[14]
    checkpoints.log("O.x", 11, SOURCE[14])
    assert follow.planned_end(path, SOURCE[14], wait_s=0) == SOURCE[15]


def test_mirrored_batches_are_logged_under_the_source_s_ids_and_the_copy_s_own_in_its_epoch():
    mirror = Mirror(namespace=0, segments=((11, 3), (14, 5)), upto=15)
    sink = SOutput("grpc://unused", "O.x.out", epoch=7, namespace=7, mirror=mirror)
    # Before any jump: the source's ids; jumps: shifted; past upto: the copy's own, epoch 7.
    assert [sink.log_batch_id(b) for b in (10, 11, 13, 14, 15)] == [10, 14, 16, 19, 20]
    assert sink.log_batch_id(16) == (7 << 32) | 16
    # A source that wrote in a namespace of its own (after a failover): its ids, its namespace.
    failed_over = SOutput(
        "grpc://unused", "O.x.out", 7, namespace=7, mirror=Mirror(2, ((11, 3),), 12)
    )
    assert failed_over.log_batch_id(12) == (2 << 32) | 15


def test_the_mirror_travels_in_the_checkpoint(tmp_path: Path):
    assert read_mirror(tmp_path) is None
    mirror = Mirror(namespace=3, segments=((11, 3), (14, 5)), upto=15)
    write_mirror(tmp_path, mirror)
    assert read_mirror(tmp_path) == mirror


class Watched(Checkpoints):
    """Checkpoints plus what the copy's query shows: its status and its last progress."""

    def __init__(self, root: Path, status: dict[str, Any], progress: list[dict[str, Any]]) -> None:
        super().__init__(root)
        self.status, self.progress = status, progress

    def query(self, fragment: str) -> SimpleNamespace:
        if fragment != "O.x":
            raise KeyError(fragment)
        return SimpleNamespace(status=self.status)

    def recent_progress(self, fragment: str, last: int | None = None) -> list[dict[str, Any]]:
        return self.progress[-(last or len(self.progress)) :]


def test_a_copy_that_never_caught_up_says_what_its_query_was_doing(copy, tmp_path):
    warm, _ = copy
    warm._offer(_source(SNAPSHOT + 1), SNAPSHOT + 1)
    idle = {"message": "Waiting for data to arrive", "isTriggerActive": False}
    warm.runtime = Watched(tmp_path / "checkpoints", idle, [])  # type: ignore[assignment]
    assert warm._doing() == ("query 'Waiting for data to arrive', no batch, offered batches [11]")
    ran = [{"batchId": 10, "timestamp": "t0"}, {"batchId": 11, "timestamp": "t1"}]
    warm.runtime = Watched(tmp_path / "checkpoints", idle, ran)  # type: ignore[assignment]
    assert "last batch 11 at t1" in warm._doing()
    warm.spec = SimpleNamespace(name="O.y")  # type: ignore[assignment]
    assert warm._doing() == "its query is gone: 'O.y'"
