"""Delta shipping to a standby host's Flight inbox (real Flight server and client, no Spark):
the copy the host holds is always the primary's tree, whatever happened to it in between."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.runtime.checkpoint_tree import diff, read_tree
from spark_jobs.runtime.shipping import DeltaShipper, Snapshot
from spark_jobs.runtime.transport import StreamClient, StreamServer, TransferError
from tests.support.checkpoints import spark_like

KEY = 0


@pytest.fixture
def standby() -> Iterator[StreamServer]:
    server = StreamServer()
    yield server
    server.shutdown()


def test_after_the_first_shipment_only_what_changed_is_sent(
    tmp_path: Path, standby: StreamServer
) -> None:
    shipper = DeltaShipper("frag", KEY)
    spark_like(tmp_path, 50)
    first = shipper.ship(standby.location, Snapshot.read(tmp_path))
    assert (first.delta, first.whole_because, first.bytes) == (False, "first", first.full_bytes)

    spark_like(tmp_path, 51)
    (tmp_path / "state/0/0/1.delta").unlink()
    snapshot = Snapshot.read(tmp_path)
    second = shipper.ship(standby.location, snapshot)
    assert second.delta and second.whole_because is None
    assert second.bytes * 5 < second.full_bytes == len(snapshot.packed.data)
    # The host's copy is the primary's pack, byte for byte (and restores as its tree).
    held = standby.take_checkpoint("frag", KEY)
    assert held.sha256 == snapshot.packed.sha256


def test_a_copy_taken_by_a_failover_makes_the_next_shipment_whole(
    tmp_path: Path, standby: StreamServer
) -> None:
    shipper = DeltaShipper("frag", KEY)
    spark_like(tmp_path, 5)
    shipper.ship(standby.location, Snapshot.read(tmp_path))
    standby.take_checkpoint("frag", KEY)  # restored elsewhere: the inbox holds nothing now
    spark_like(tmp_path, 6)
    snapshot = Snapshot.read(tmp_path)
    sent = shipper.ship(standby.location, snapshot)
    assert not sent.delta
    assert sent.whole_because is not None and "no copy held" in sent.whole_because
    assert standby.take_checkpoint("frag", KEY).sha256 == snapshot.packed.sha256


def test_a_copy_replaced_behind_the_shippers_back_is_never_patched(
    tmp_path: Path, standby: StreamServer
) -> None:
    shipper = DeltaShipper("frag", KEY)
    spark_like(tmp_path / "a", 5)
    shipper.ship(standby.location, Snapshot.read(tmp_path / "a"))
    # Someone else (an older keeper, a restarted primary) ships another checkpoint there.
    spark_like(tmp_path / "b", 3)
    intruder = DeltaShipper("frag", KEY)
    intruder.ship(standby.location, Snapshot.read(tmp_path / "b"))
    spark_like(tmp_path / "a", 6)
    snapshot = Snapshot.read(tmp_path / "a")
    sent = shipper.ship(standby.location, snapshot)
    assert not sent.delta and "computed against" in (sent.whole_because or "")
    assert standby.take_checkpoint("frag", KEY).sha256 == snapshot.packed.sha256


def test_a_refused_delta_changes_nothing_and_says_why(
    tmp_path: Path, standby: StreamServer
) -> None:
    spark_like(tmp_path, 3)
    base = read_tree(tmp_path)
    spark_like(tmp_path, 4)
    delta = diff(base, read_tree(tmp_path))
    with StreamClient(standby.location) as client, pytest.raises(TransferError, match="no copy"):
        client.ship_checkpoint_delta("frag", KEY, delta)
    with pytest.raises(TransferError, match="no verified checkpoint"):
        standby.take_checkpoint("frag", KEY)


def test_an_unreachable_host_is_a_transfer_error_and_is_shipped_whole_later(
    tmp_path: Path, standby: StreamServer
) -> None:
    shipper = DeltaShipper("frag", KEY, timeout=2.0)
    spark_like(tmp_path, 3)
    gone = StreamServer()
    location = gone.location
    gone.shutdown()
    with pytest.raises(TransferError):
        shipper.ship(location, Snapshot.read(tmp_path))
    sent = shipper.ship(standby.location, Snapshot.read(tmp_path))
    assert (sent.delta, sent.whole_because) == (False, "first")


def test_when_a_delta_would_be_larger_the_whole_checkpoint_is_sent(
    tmp_path: Path, standby: StreamServer
) -> None:
    shipper = DeltaShipper("frag", KEY)
    # A copy of many files with names that do not compress, replaced by a small checkpoint:
    # the delta would list every old name as removed.
    (tmp_path / "a").mkdir()
    for _ in range(3000):
        (tmp_path / "a" / uuid.uuid4().hex).write_bytes(b"x")
    shipper.ship(standby.location, Snapshot.read(tmp_path / "a"))
    spark_like(tmp_path / "b", 2)
    snapshot = Snapshot.read(tmp_path / "b")
    sent = shipper.ship(standby.location, snapshot)
    assert (sent.delta, sent.whole_because) == (False, "smaller whole")
    assert standby.take_checkpoint("frag", KEY).sha256 == snapshot.packed.sha256
