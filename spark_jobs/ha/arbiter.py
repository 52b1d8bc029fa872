"""The reconciliation arbiter: one permit per fragment, for replicas that cannot reach each other.

Replicas of one fragment ask each other before reconciling (``app.availability.permission``), so
they never all stop producing at once (Borealis SIGMOD 2005, section 5.2). A replica that cannot
reach a peer cannot tell a crashed peer from a partition between them; a partitioned peer is
alive, may serve consumers on its side, and may want to reconcile too. Granting oneself
permission then (the earlier rule) lets both reconcile together. Instead the replica asks this
arbiter, which holds at most one permit per fragment: of two replicas cut off from each other,
one reconciles and the other keeps producing (tentatively) until the first releases.

The permit is a lease: a holder that dies never releases, so a permit older than ``lease_ms``
goes to the next asker (a reconciliation takes far less than the lease; a holder still
reconciling renews it by asking again). The arbiter is a service beside the registry; the
scenario driver runs one (``spark_jobs.ha.cluster``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.flight as flight

from spark_jobs.runtime.transport import StreamServer

DEFAULT_LEASE_MS = 10_000


class ReconciliationLeases:
    """At most one unexpired holder per fragment (thread-safe: Flight serves calls in threads)."""

    def __init__(
        self, *, lease_ms: int = DEFAULT_LEASE_MS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if lease_ms <= 0:
            raise ValueError(f"lease_ms must be positive, got {lease_ms}")
        self.lease_ms = lease_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._holders: dict[str, tuple[str, float]] = {}
        # (fragment, replica, granted) for every request, in order: what a report shows.
        self.decisions: list[tuple[str, str, bool]] = []

    def request(self, fragment: str, replica: str) -> bool:
        now = self._clock()
        with self._lock:
            held = self._holders.get(fragment)
            granted = held is None or held[0] == replica or held[1] <= now
            if granted:
                self._holders[fragment] = (replica, now + self.lease_ms / 1000)
            self.decisions.append((fragment, replica, granted))
            return granted

    def release(self, fragment: str, replica: str) -> None:
        with self._lock:
            held = self._holders.get(fragment)
            if held is not None and held[0] == replica:
                del self._holders[fragment]

    def holder(self, fragment: str) -> str | None:
        with self._lock:
            held = self._holders.get(fragment)
            if held is None or held[1] <= self._clock():
                return None
            return held[0]


class ArbiterServer(StreamServer):
    """Flight actions ``arbiter_request`` / ``arbiter_release`` ({fragment, replica}) and
    ``arbiter_decisions``."""

    def __init__(self, port: int = 0, *, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        super().__init__(port=port)
        self.leases = ReconciliationLeases(lease_ms=lease_ms)

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        kind = action.type
        if not kind.startswith("arbiter_"):
            yield from super().do_action(context, action)
            return
        body = json.loads(action.body.to_pybytes()) if action.body.size else {}
        result: Any = None
        if kind == "arbiter_decisions":
            result = [list(d) for d in self.leases.decisions]
        else:
            fragment, replica = body.get("fragment"), body.get("replica")
            if not isinstance(fragment, str) or not isinstance(replica, str):
                raise flight.FlightServerError(
                    f"{kind}: body needs string fields 'fragment' and 'replica', got {body!r}"
                )
            if kind == "arbiter_request":
                result = self.leases.request(fragment, replica)
            elif kind == "arbiter_release":
                self.leases.release(fragment, replica)
            else:
                raise flight.FlightServerError(f"unknown action {kind!r}")
        yield json.dumps(result).encode()
