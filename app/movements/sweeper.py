"""The registry's sweeper of stale movements: a background thread of the service.

A prepared movement holds its task (no other move, no offer of it) until its target commits.
When the target crashes in between, nobody else would ever end it; the sweeper aborts it once
its lease is over (``abort_stale``), so the task stays with its old host and can move again.
Each round is its own transaction; a failed round (the database away) is logged and the next
one tries again. The thread is a daemon and stops when the service shuts down.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from app.movements.service import abort_stale

log = logging.getLogger(__name__)

# However long the lease, look at least this often: a lapsed lease is noticed within
# min(MAX_INTERVAL, lease / 4) seconds of its end.
MAX_INTERVAL_SECONDS = 5.0


def sweep_interval(lease_seconds: float) -> float:
    return min(MAX_INTERVAL_SECONDS, lease_seconds / 4)


class StaleMovementSweeper:
    def __init__(self, sessions: sessionmaker[Session], lease_seconds: float) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"the movement lease must be > 0 s, got {lease_seconds}")
        self._sessions = sessions
        self.lease_seconds = lease_seconds
        self.interval = sweep_interval(lease_seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> int:
        """One round, in its own transaction: how many movements it aborted."""
        with self._sessions() as session, session.begin():
            aborted = abort_stale(session, lease_seconds=self.lease_seconds)
        if aborted:
            log.info(
                "aborted %d prepared movement(s) past their %gs lease", aborted, self.lease_seconds
            )
        return aborted

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep()
            except Exception:
                log.exception("sweeping stale movements failed; retrying in %gs", self.interval)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name="fedload-movement-sweeper", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the round in progress, if any (waits at most ``timeout`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
