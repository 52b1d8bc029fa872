"""The registry's sweeper of stale movements: a background thread of the service.

A prepared movement holds its task (no other move, no offer of it) until its target commits.
When the target crashes in between, nobody else would ever end it; the sweeper aborts it once
its lease is over (``abort_stale``), so the task stays with its old host and can move again.
Each round is its own transaction; a failed round (the database away) is logged and the next
one tries again. The thread is a daemon and stops when the service shuts down.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from app.db.background import PeriodicRounds
from app.movements.service import abort_stale

log = logging.getLogger(__name__)

# However long the lease, look at least this often: a lapsed lease is noticed within
# min(MAX_INTERVAL, lease / 4) seconds of its end.
MAX_INTERVAL_SECONDS = 5.0


def sweep_interval(lease_seconds: float) -> float:
    return min(MAX_INTERVAL_SECONDS, lease_seconds / 4)


class StaleMovementSweeper(PeriodicRounds):
    name = "fedload-movement-sweeper"
    doing = "sweeping stale movements"
    log = log

    def __init__(self, sessions: sessionmaker[Session], lease_seconds: float) -> None:
        super().__init__()
        if lease_seconds <= 0:
            raise ValueError(f"the movement lease must be > 0 s, got {lease_seconds}")
        self._sessions = sessions
        self.lease_seconds = lease_seconds
        self.interval = sweep_interval(lease_seconds)
        self.period = self.interval

    def sweep(self) -> int:
        """One round, in its own transaction: how many movements it aborted."""
        with self._sessions() as session, session.begin():
            aborted = abort_stale(session, lease_seconds=self.lease_seconds)
        if aborted:
            log.info(
                "aborted %d prepared movement(s) past their %gs lease", aborted, self.lease_seconds
            )
        return aborted
