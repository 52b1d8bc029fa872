"""Reconciliation permission: replicas of one fragment never reconcile at the same time.

While a replica reconciles it stops producing fresh output, so if every replica reconciled at
once the consumers would see the output stop (Borealis SIGMOD 2005, section 5.2: a node asks its
replicas for permission before reconciling). Two forms of the same rule:

- ``ReconciliationPermits``: an arbiter (the registry, or the scenario driver) holding at most one
  permit per fragment;
- ``grant_peer_request``: the peer-to-peer rule a replica applies when another one asks it.
"""

from __future__ import annotations

import threading

from app.availability.states import NodeState


class ReconciliationPermits:
    """At most one holder per fragment; thread-safe (agents ask concurrently)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[str, str] = {}
        self.granted: list[tuple[str, str]] = []
        self.refused = 0

    def request(self, fragment: str, replica: str) -> bool:
        with self._lock:
            holder = self._holders.get(fragment)
            if holder is None or holder == replica:
                if holder is None:
                    self.granted.append((fragment, replica))
                self._holders[fragment] = replica
                return True
            self.refused += 1
            return False

    def release(self, fragment: str, replica: str) -> None:
        with self._lock:
            if self._holders.get(fragment) == replica:
                del self._holders[fragment]

    def holder(self, fragment: str) -> str | None:
        with self._lock:
            return self._holders.get(fragment)


def grant_peer_request(
    my_name: str,
    my_state: NodeState,
    i_am_asking: bool,
    requester: str,
) -> bool:
    """Whether a replica lets a peer reconcile now.

    Refuse while reconciling oneself; when both want to reconcile, the lower name goes first
    (a fixed order, so two replicas asking each other never both refuse forever, nor both agree).
    """
    if my_state is NodeState.STABILIZATION:
        return False
    if i_am_asking and my_state is NodeState.UP_FAILURE:
        return requester < my_name
    return True


class PeerPermission:
    """One replica's side of the peer-to-peer permission protocol, with grant leases.

    A replica that grants a peer remembers it (until the peer releases or ``lease_ms`` passes)
    and does not ask for itself meanwhile; two replicas asking each other at once are ordered by
    ``grant_peer_request``. So two replicas never both hold permission, also when requests cross.
    """

    def __init__(self, name: str, *, lease_ms: int = 10_000) -> None:
        self.name = name
        self.lease_ms = lease_ms
        self.asking = False
        self._granted: dict[str, int] = {}

    def may_ask(self, now: int) -> bool:
        self._granted = {peer: until for peer, until in self._granted.items() if until > now}
        return not self._granted

    def on_request(self, requester: str, my_state: NodeState, now: int) -> bool:
        if not self.may_ask(now) and requester not in self._granted:
            return False
        if not grant_peer_request(self.name, my_state, self.asking, requester):
            return False
        self._granted[requester] = now + self.lease_ms
        return True

    def on_release(self, requester: str) -> None:
        self._granted.pop(requester, None)
