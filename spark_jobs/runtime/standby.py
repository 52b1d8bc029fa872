"""Passive standby in the one-process runtime: the primary's checkpoint kept at its replica's host.

A ``StandbyKeeper`` runs beside the primary. Every ``every_s`` seconds it reads the primary's
checkpoint while the query runs and pushes it to the Flight inbox of the participant hosting the
fragment's replica, under ``STANDBY_SHIPMENT``: the whole checkpoint the first time, then what
changed since (``shipping.DeltaShipper``). It also acknowledges the fragment's inputs as
``<fragment>.standby`` at the shipped checkpoint's offset, so
the producers keep what a failover from that checkpoint replays. Failover is then the ordinary
movement path: ``relocate(fragment, AlreadyShipped(primary, STANDBY_SHIPMENT), replica_host)``.

When the market moves the replica (``move``), the standby follows it, two-phase like ``relocate``:

1. prepare: the coordinator records the replica's movement (already prepared by the accepted
   offer when the coordinator is the registry);
2. ship the primary's latest checkpoint to the new host's inbox;
3. commit; only then drop the old host's copy and ship to the new host from now on.

A failed ship aborts the movement and leaves the old host's copy as it was (it is still the
replica of record, and periodic shipping keeps going there). Between 2 and 3 the new host holds a
copy nobody fails over to; an abort drops it.

Every call to a replica host goes over Flight (ship, and ``discard_checkpoint`` to drop a copy),
so the hosts may be other processes; the primary's checkpoint is read from its local directory,
so the keeper runs beside the primary.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

from spark_jobs.runtime.checkpoint_tree import Tree
from spark_jobs.runtime.coordinator import MovementCoordinator
from spark_jobs.runtime.host import FragmentRuntime, FragmentSpec
from spark_jobs.runtime.movement import MoveAborted, MoveInDoubt
from spark_jobs.runtime.shipping import DeltaShipper, Snapshot
from spark_jobs.runtime.sunion import UNREACHABLE
from spark_jobs.runtime.transport import STANDBY_SHIPMENT, StreamClient, TransferError

log = logging.getLogger(__name__)

# Inbox key of checkpoints pushed ahead of any movement (registry movement ids start at 1); the
# same key as the crash scenario's hosts (spark_jobs.ha.spark_host).
# A ship is one DoPut of a few MiB on a healthy link; a host that does not take it within this is
# down or cut off, and the movement is better aborted than left prepared.
SHIP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Shipment:
    """One checkpoint pushed to a standby host."""

    host: str
    at: float
    # What crossed the link (a delta after the first shipment), and the whole pack's size.
    bytes: int
    sha256: str
    # The last micro-batch committed in the pack and the bucket its next batch reads from (the
    # standby replays from there); None when the pack holds no committed batch.
    batch: int | None
    offset: int | None
    full_bytes: int
    delta: bool


@dataclass(frozen=True)
class StandbyMove:
    movement_id: int
    epoch: int
    shipment: Shipment


def committed_offset(tree: Tree) -> tuple[int, int] | None:
    """(last committed batch, bucket after it) of a checkpoint, read from the checkpoint itself.

    Read from the shipped tree rather than from the query's progress so that the acknowledgement
    names exactly what the shipped copy resumes from, not what the query had done when someone
    looked.
    """
    commits = [
        int(name.split("/", 1)[1])
        for name, content in tree.items()
        if content is not None and name.startswith("commits/") and name[8:].isdigit()
    ]
    if not commits:
        return None
    batch = max(commits)
    logged = tree.get(f"offsets/{batch}")
    if logged is None:
        return None
    # An offset log entry: a version line, the batch metadata, then one line per source.
    lines = logged.decode().strip().splitlines()
    return batch, int(json.loads(lines[-1])["bucket"])


def snapshot_running(
    runtime: FragmentRuntime, fragment: str, *, quiet_wait_s: float = 0.5
) -> Snapshot:
    """Read a fragment's checkpoint while its query runs (``FragmentRuntime.pack`` stops it).

    A live read is consistent (see ``checkpoint_tree.read_tree``); between micro-batches is
    merely the quiet moment, and a busy query is read after a short wait anyway.
    """
    if runtime.is_running(fragment):
        query = runtime.query(fragment)
        deadline = time.monotonic() + quiet_wait_s
        while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.02)
    return Snapshot.read(runtime.checkpoint_dir(fragment))


def drop_copy(host: FragmentRuntime, fragment: str) -> bool:
    """Remove the standby checkpoint from ``host``'s inbox over Flight (the host may be another
    process); False if it held none or cannot be reached.

    Never raises for an unreachable host: it is called after an abort (the ship to that host just
    failed) and after a commit (the move stands), and a copy left behind costs only its memory.
    """
    try:
        with StreamClient(host.location, timeout=SHIP_TIMEOUT_S) as client:
            return client.discard_checkpoint(fragment, STANDBY_SHIPMENT)
    except UNREACHABLE as error:
        log.warning("standby copy of %s left at %s: %s", fragment, host.name, error)
        return False


class StandbyKeeper:
    def __init__(
        self,
        fragment: FragmentSpec,
        primary: FragmentRuntime,
        replica: FragmentRuntime,
        *,
        every_s: float = 1.0,
    ) -> None:
        self.fragment = fragment
        self.primary = primary
        self.replica = replica
        self.every_s = every_s
        self.shipments: list[Shipment] = []
        self._shipper = DeltaShipper(fragment.name, STANDBY_SHIPMENT, timeout=SHIP_TIMEOUT_S)
        self.errors: list[str] = []
        # One ship at a time: a movement must not race the periodic push to the old host.
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def consumer(self) -> str:
        return f"{self.fragment.name}.standby"

    def hold(self, from_bucket: int | None = None) -> None:
        """Register the standby as a consumer of every input before the primary acknowledges
        anything the standby may replay (a producer trims below the consumers it knows)."""
        for ref in self.fragment.inputs:
            with StreamClient(ref.location) as client:
                client.hold(ref.stream, self.consumer, from_bucket)

    def ship(self) -> Shipment | None:
        """Push the primary's checkpoint to the replica's host now (None: nothing committed)."""
        with self._lock:
            return self._ship_to(self.replica)

    def _ship_to(self, host: FragmentRuntime) -> Shipment | None:
        if not self.primary.checkpoint_dir(self.fragment.name).exists():
            return None
        snapshot = snapshot_running(self.primary, self.fragment.name)
        position = committed_offset(snapshot.tree)
        if position is None:
            return None
        began = time.time()
        sent = self._shipper.ship(host.location, snapshot)
        shipment = Shipment(
            host.name,
            began,
            sent.bytes,
            snapshot.packed.sha256,
            *position,
            full_bytes=sent.full_bytes,
            delta=sent.delta,
        )
        self.shipments.append(shipment)
        return shipment

    def _drop(self, host: FragmentRuntime) -> None:
        drop_copy(host, self.fragment.name)
        self._shipper.forget(host.location)

    def _acknowledge(self, shipment: Shipment) -> None:
        if shipment.offset is None:
            return
        for ref in self.fragment.inputs:
            with StreamClient(ref.location) as client:
                client.ack(ref.stream, self.consumer, shipment.offset)

    def ship_and_acknowledge(self) -> Shipment | None:
        """One period's work: ship, then let the producers trim below the shipped offset (not
        before: until the new copy is in place the older one may still be restored)."""
        shipment = self.ship()
        if shipment is not None:
            self._acknowledge(shipment)
        return shipment

    def start(self) -> None:
        """Ship every ``every_s`` seconds until ``stop``."""
        if self._thread is not None:
            return
        self._stopped.clear()

        def run() -> None:
            while not self._stopped.wait(self.every_s):
                if not self.primary.is_running(self.fragment.name):
                    continue  # stopped or failed: the last shipped copy is the one to restore
                try:
                    self.ship_and_acknowledge()
                except Exception as error:  # keep shipping; the next period may get through
                    self.errors.append(f"{type(error).__name__}: {error}")
                    log.warning("standby of %s: %s", self.fragment.name, error)

        self._thread = threading.Thread(
            target=run, name=f"standby-{self.fragment.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def move(
        self,
        target: FragmentRuntime,
        coordinator: MovementCoordinator,
        *,
        record: str | None = None,
        reason: str = "load",
    ) -> StandbyMove:
        """Move the standby from the replica's host to ``target`` (see the module docstring).

        ``record`` is the name under which ``coordinator`` tracks the replica: the task's name
        for the registry (which tells a replica's movement from the primary's by its source)."""
        name = record or self.fragment.name
        with self._lock:
            source = self.replica
            move = coordinator.prepare(name, source.name, target.name, reason)
            try:
                shipment = self._ship_to(target)
                if shipment is None:
                    raise TransferError(f"{self.fragment.name} has no committed checkpoint yet")
            except Exception as error:
                coordinator.abort(move.movement_id, f"{type(error).__name__}: {error}")
                self._drop(target)
                raise MoveAborted(
                    f"standby of {self.fragment.name} to {target.name} aborted: {error}"
                ) from error
            try:
                epoch = coordinator.commit(move.movement_id)
            except Exception as error:
                # The commit may have happened with its answer lost: both hosts keep a copy and
                # the old one keeps receiving, since a copy too many costs memory while dropping
                # the one the registry names would leave no standby at all.
                try:
                    coordinator.abort(move.movement_id, f"commit failed: {error}")
                except Exception as failure:
                    log.warning("abort of movement %s: %s", move.movement_id, failure)
                raise MoveInDoubt(
                    f"standby of {self.fragment.name} to {target.name}: commit unknown: {error}"
                ) from error
            self._drop(source)
            self.replica = target
        self._acknowledge(shipment)
        return StandbyMove(move.movement_id, epoch, shipment)
