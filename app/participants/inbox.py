"""The registry's side of agents' heartbeats: when each one arrived, and up to when the registry
has recorded every heartbeat that reached it (``checked_until``).

The detector's rule (``app.availability.detector``) fails a peer only once a heartbeat went
unanswered to the end of the window, as seen by the judge. The registry does not ping: agents
send it heartbeats. Its judge, the failure sweeper, may therefore count a window as missed only
up to the instant until which nothing is still on its way through the service: a heartbeat read
from its socket but waiting for an admission slot, a thread, or its transaction is in flight,
and so is one still in the socket while the event loop is behind. Judged by the clock alone, a
service starved of CPU (its sweeper thread woke first) would fail the live agents whose
heartbeats it had not got round to.

- ``HeartbeatArrivals``, an ASGI middleware placed outermost, notes each heartbeat request when
  the event loop first sees it and holds it in flight until its answer is sent, after the
  commit, and then notes when that answer went out: the agent sends its next heartbeat only
  after it, so the participant's window runs from there (under load the commit and answer took
  up to 2 s after the heartbeat was recorded: a window from the record closed before the agent
  could send again);
- ``loop_watch`` runs on the event loop: each round stamps the time, then lets a few loop
  iterations pass, so bytes that reached a socket before that stamp have become requests the
  middleware saw; the stamp is then a horizon. A loop that falls behind holds the horizon back.

Per process: with several workers, a heartbeat in flight in another worker is not seen (each
worker's sweeper judges by its own horizon); run the sweeper's service with one worker per
database when failures must never be false (``fedload serve`` defaults to one).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

HEARTBEAT_PATH = "/v1/participants/me/heartbeat"
# Set by the heartbeat endpoint in the request's state: whose heartbeat it was.
HEARTBEAT_OF = "heartbeat_of"
# Loop iterations between a round's stamp and its use as a horizon: one for the selector to
# read bytes that came before it, one for the request's task to reach the middleware, one spare.
ITERATIONS = 3


class HeartbeatInbox:
    """Arrivals in flight and the event loop's horizon, shared by the middleware (event loop)
    and the sweeper (its own thread)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._in_flight: dict[int, float] = {}
        self._loop_horizon: float | None = None
        # Participant id -> when its last heartbeat's answer was sent. The database holds the
        # time the heartbeat was recorded, before its commit and answer; the agent sends its
        # next one only after the answer, so its window runs from the answer (as an asker's
        # silence runs from its last answer), however long the commit took under load.
        self._answered: dict[int, float] = {}
        # The registry heard nothing before it started: a window that began while it was down
        # (a restart) is counted from here, so its own outage never fails anyone.
        self.listening_since = clock()

    def arrived(self) -> tuple[int, float]:
        with self._lock:
            token, at = next(self._tokens), self._clock()
            self._in_flight[token] = at
            return token, at

    def done(self, token: int) -> None:
        with self._lock:
            self._in_flight.pop(token, None)

    def answered(self, participant_id: int) -> None:
        with self._lock:
            self._answered[participant_id] = self._clock()

    def answers(self) -> dict[int, datetime]:
        with self._lock:
            return {pid: datetime.fromtimestamp(at, UTC) for pid, at in self._answered.items()}

    def loop_checked(self, at: float) -> None:
        with self._lock:
            self._loop_horizon = at

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def checked_until(self) -> float:
        """Every heartbeat that reached this process before this instant (seconds since the
        epoch) is recorded: the oldest still in flight, and the event loop's horizon, bound it.
        Without a running loop watch (no event loop yet) only what is in flight bounds it."""
        with self._lock:
            bounds = [self._clock(), *self._in_flight.values()]
            if self._loop_horizon is not None:
                bounds.append(self._loop_horizon)
            return min(bounds)

    def checked_until_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.checked_until(), UTC)

    def listening_since_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.listening_since, UTC)


async def loop_watch(inbox: HeartbeatInbox, every: float) -> None:
    """Advance the loop's horizon every ``every`` seconds, until cancelled."""
    while True:
        stamp = time.time()
        for _ in range(ITERATIONS):
            await asyncio.sleep(0)
        inbox.loop_checked(stamp)
        await asyncio.sleep(every)


class HeartbeatArrivals:
    """Pure ASGI middleware: heartbeats are noted on arrival and held in flight until their
    response has been sent (the session commits before that)."""

    def __init__(self, app: Any, inbox: HeartbeatInbox) -> None:
        self.app = app
        self.inbox = inbox

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or scope.get("path") != HEARTBEAT_PATH
        ):
            await self.app(scope, receive, send)
            return
        token, _ = self.inbox.arrived()
        try:
            await self.app(scope, receive, send)  # returns once the answer has been sent
            participant = scope.get("state", {}).get(HEARTBEAT_OF)
            if participant is not None:
                self.inbox.answered(int(participant))
        finally:
            self.inbox.done(token)
