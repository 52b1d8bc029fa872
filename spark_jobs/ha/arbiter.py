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
reconciling renews it by asking again). The rule is ``app.availability.leases``, shared with
the registry's REST arbiter (``/v1/permits``, ``app.permits``), which is the arbiter of a
deployment; the scenario driver runs this Flight one (``spark_jobs.ha.cluster``). A node picks
its client from its ``arbiter`` location: ``arbiter_client``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pyarrow.flight as flight

from app.availability import leases
from app.participant.client import FedloadClient
from spark_jobs.ha.wire import HAClient
from spark_jobs.runtime.transport import StreamServer

DEFAULT_LEASE_MS = 10_000


class ReconciliationLeases:
    """The permits of every fragment in memory, by the shared rule (``app.availability.leases``);
    thread-safe: Flight serves calls in threads."""

    def __init__(
        self, *, lease_ms: int = DEFAULT_LEASE_MS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if lease_ms <= 0:
            raise ValueError(f"lease_ms must be positive, got {lease_ms}")
        self.lease_ms = lease_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._permits: dict[str, leases.Permit] = {}
        # (fragment, replica, granted) for every request, in order: what a report shows.
        self.decisions: list[tuple[str, str, bool]] = []

    def request(self, fragment: str, replica: str) -> bool:
        now = self._clock()
        with self._lock:
            decision = leases.request(
                self._permits.get(fragment), replica, now, self.lease_ms / 1000
            )
            self._permits[fragment] = decision.permit
            self.decisions.append((fragment, replica, decision.granted))
            return decision.granted

    def release(self, fragment: str, replica: str) -> None:
        """Give the permit back; a release by a replica that does not hold it changes nothing
        (a late release after the lease moved on must not free the new holder's permit)."""
        with self._lock, contextlib.suppress(leases.NotHolder):
            self._permits[fragment] = leases.release(self._permits.get(fragment), replica)

    def holder(self, fragment: str) -> str | None:
        with self._lock:
            permit = self._permits.get(fragment)
            if permit is None or not permit.held_at(self._clock()):
                return None
            return permit.holder


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


class ArbiterClient(Protocol):
    def request(self, fragment: str, replica: str) -> bool: ...

    def release(self, fragment: str, replica: str) -> None: ...

    def close(self) -> None: ...


class FlightArbiterClient:
    """The scenarios' arbiter (``ArbiterServer``) over Flight actions."""

    def __init__(self, location: str, *, timeout: float) -> None:
        self._client = HAClient(location, timeout=timeout)

    def request(self, fragment: str, replica: str) -> bool:
        return bool(self._client.action("arbiter_request", fragment=fragment, replica=replica))

    def release(self, fragment: str, replica: str) -> None:
        self._client.action("arbiter_release", fragment=fragment, replica=replica)

    def close(self) -> None:
        self._client.close()


class RestArbiterClient:
    """The registry's arbiter (``/v1/permits``) with the participant's API key."""

    def __init__(self, url: str, key: str, *, timeout: float) -> None:
        self._client = FedloadClient(url, key, timeout=timeout)

    def request(self, fragment: str, replica: str) -> bool:
        return bool(self._client.request_permit(fragment, replica)["granted"])

    def release(self, fragment: str, replica: str) -> None:
        self._client.release_permit(fragment, replica)

    def close(self) -> None:
        self._client.close()


def is_rest(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def arbiter_client(location: str, *, key: str | None, timeout: float) -> ArbiterClient:
    """The REST client for an http(s) URL (the registry), else the Flight one."""
    if is_rest(location):
        if not key:
            raise ValueError(
                f"arbiter {location} is the registry's REST arbiter: the node config needs "
                "'arbiter_key' (an API key of the participant hosting the node)"
            )
        return RestArbiterClient(location, key, timeout=timeout)
    return FlightArbiterClient(location, timeout=timeout)
