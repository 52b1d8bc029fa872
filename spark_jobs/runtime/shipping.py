"""Periodic checkpoint shipping to a standby, as deltas where the standby's copy allows.

The first shipment to a host is the whole checkpoint; after that each one is the difference
between the tree the host holds and the primary's current tree (``checkpoint_tree``), unless the
whole tree is smaller. The host applies a delta only to the copy it was computed against, so
whatever went wrong in between (a lost answer, a copy taken by a failover, a host restarted) ends
in a refusal, and the shipper sends the whole tree at once instead: a refused delta costs one
round trip, never a wrong standby.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spark_jobs.runtime.checkpoint_tree import Tree, diff, digest, pack_tree, read_tree
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient, TransferError


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint as read from the primary's directory: the tree and its pack."""

    tree: Tree
    packed: PackedCheckpoint

    @classmethod
    def read(cls, directory: Path) -> Snapshot:
        tree = read_tree(directory)
        return cls(tree, PackedCheckpoint.of(pack_tree(tree)))


@dataclass(frozen=True)
class Sent:
    """One shipment: what crossed the link against what a whole pack would have been."""

    bytes: int
    full_bytes: int
    delta: bool
    # Why a delta was not sent (None when it was): "first", "smaller whole", "refused: ...".
    whole_because: str | None


class DeltaShipper:
    """Ships one fragment's checkpoints under one inbox key, remembering per host what it holds."""

    def __init__(self, fragment: str, movement: int, *, timeout: float | None = None) -> None:
        self.fragment = fragment
        self.movement = movement
        self.timeout = timeout
        # Host location -> (digest, tree) of the copy it acknowledged last.
        self._held: dict[str, tuple[str, Tree]] = {}

    def ship(self, location: str, snapshot: Snapshot) -> Sent:
        """``TransferError`` when even the whole checkpoint could not be delivered."""
        held = self._held.pop(location, None)
        with StreamClient(location, timeout=self.timeout) as client:
            whole_because = "first"
            if held is not None:
                delta = diff(held[1], snapshot.tree)
                whole_because = "smaller whole"
                if len(delta.encoded) < len(snapshot.packed.data):
                    try:
                        sent = client.ship_checkpoint_delta(self.fragment, self.movement, delta)
                    except TransferError as error:
                        whole_because = f"refused: {error}"
                    else:
                        self._held[location] = (delta.result, snapshot.tree)
                        return Sent(sent, len(snapshot.packed.data), True, None)
            client.ship_checkpoint(self.fragment, self.movement, snapshot.packed)
        self._held[location] = (digest(snapshot.tree), snapshot.tree)
        size = len(snapshot.packed.data)
        return Sent(size, size, False, whole_because)

    def forget(self, location: str) -> None:
        """The host no longer holds this fragment's copy (dropped, or taken by a failover)."""
        self._held.pop(location, None)
