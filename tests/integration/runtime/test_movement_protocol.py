"""The two-phase protocol of relocate() when the registry fails, and the coordinator's rules.

The checkpoint here is a small directory rather than a Spark query's, so these run in a second;
the Spark tests in test_runtime_spark.py cover a real query's checkpoint.
"""

from __future__ import annotations

import dataclasses

import pytest

from spark_jobs.runtime import (
    InMemoryCoordinator,
    MoveAborted,
    MoveInDoubt,
    MovementRefused,
    PackedCheckpoint,
    RemoteHost,
    StreamClient,
    TransferError,
)
from spark_jobs.runtime.host import pack_directory
from spark_jobs.runtime.movement import relocate
from tests.integration.runtime.conftest import ports_fragment


@dataclasses.dataclass
class FakeSource:
    """A live source host whose checkpoint is a directory with one file."""

    directory: object
    host: str = "A"
    calls: list = dataclasses.field(default_factory=list)

    def release(self, fragment) -> PackedCheckpoint:
        self.calls.append("release")
        return pack_directory(self.directory)

    def reinstate(self, fragment, epoch) -> None:
        self.calls.append(("reinstate", epoch))

    def retire(self, fragment) -> None:
        self.calls.append("retire")


class CommitFails(InMemoryCoordinator):
    def __init__(self, hosts, *, registry_down: bool = False):
        super().__init__(hosts)
        self.registry_down = registry_down

    def commit(self, movement_id):
        raise ConnectionError("registry went away")

    def host(self, fragment):
        if self.registry_down:
            raise ConnectionError("registry went away")
        return super().host(fragment)


@pytest.fixture
def source(tmp_path):
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('{"bucket": 3}')
    return FakeSource(checkpoint)


def test_failed_commit_aborts_and_the_source_resumes(servers, make_runtime, source):
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    target = make_runtime("B")
    coordinator = CommitFails({"frag": "A"})
    with pytest.raises(MoveAborted, match="registry went away"):
        relocate(spec, source, target, coordinator=coordinator)
    assert coordinator.host("frag") == "A"
    assert coordinator.status(1) == "aborted"
    assert source.calls == ["release", ("reinstate", 0)]
    assert not target.checkpoint_dir("frag").exists()


def test_commit_with_unknown_outcome_runs_nowhere(servers, make_runtime, source):
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    target = make_runtime("B")
    coordinator = CommitFails({"frag": "A"}, registry_down=True)
    with pytest.raises(MoveInDoubt):
        relocate(spec, source, target, coordinator=coordinator)
    assert source.calls == ["release"]  # not reinstated: it might no longer be the host
    assert not target.is_running("frag")
    assert (target.checkpoint_dir("frag") / "offsets" / "0").read_text() == '{"bucket": 3}'


def test_shipped_checkpoint_is_verified_and_restored_byte_for_byte(make_runtime, source):
    target = make_runtime("B")
    packed = source.release(None)
    with StreamClient(target.location) as client:
        with pytest.raises(TransferError, match="refused"):
            client.ship_checkpoint("frag", 7, PackedCheckpoint(packed.data, "0" * 64))
        client.ship_checkpoint("frag", 7, packed)
    target.restore("frag", 7)
    assert (target.checkpoint_dir("frag") / "offsets" / "0").read_text() == '{"bucket": 3}'


def test_coordinator_allows_one_move_in_flight_from_the_host_only():
    coordinator = InMemoryCoordinator({"frag": "A"})
    with pytest.raises(MovementRefused):
        coordinator.prepare("frag", "B", "C", "load")  # B is not the host
    first = coordinator.prepare("frag", "A", "B", "load")
    with pytest.raises(MovementRefused):
        coordinator.prepare("frag", "A", "C", "load")  # one in flight
    coordinator.abort(first.movement_id, "test")
    coordinator.abort(first.movement_id, "again")  # idempotent
    with pytest.raises(MovementRefused):
        coordinator.commit(first.movement_id)
    second = coordinator.prepare("frag", "A", "C", "load")
    assert second.epoch == 1
    assert coordinator.commit(second.movement_id) == 1
    assert (coordinator.host("frag"), coordinator.current_epoch("frag")) == ("C", 1)


def test_remote_source_refuses_release_without_a_prepared_movement(servers, make_runtime):
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    asked: list[tuple[str, int]] = []

    def authorize(fragment: str, movement: int) -> bool:
        asked.append((fragment, movement))
        return False

    source = make_runtime("A", authorize_release=authorize)
    target = make_runtime("B")
    coordinator = InMemoryCoordinator({"frag": "A"})
    with pytest.raises(MoveAborted, match="does not release"):
        relocate(spec, RemoteHost("A", source.location), target, coordinator=coordinator)
    assert asked == [("frag", 1)]
    assert coordinator.host("frag") == "A" and coordinator.status(1) == "aborted"
