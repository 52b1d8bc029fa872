"""The registry's failure sweeper: a background thread of the service that marks participants
failed when it happens, not when someone lists them (``app.participants.failures``).

Every ``Settings.failure_sweep_interval_seconds`` one round, in its own transaction, judges
every member by the detector's rule up to the inbox's ``checked_until``: a heartbeat still on
its way through this service keeps its sender alive. A failed round (the database away) is
logged and the next one tries again. A daemon thread, stopped with the service.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from app.availability.detector import check_window
from app.db.background import PeriodicRounds
from app.participants import failures
from app.participants.inbox import HeartbeatInbox

log = logging.getLogger(__name__)


class FailureSweeper(PeriodicRounds):
    name = "fedload-failure-sweeper"
    doing = "sweeping for failed participants"
    log = log

    def __init__(
        self,
        sessions: sessionmaker[Session],
        inbox: HeartbeatInbox,
        *,
        interval_seconds: float,
        misses: int,
        every: float,
    ) -> None:
        super().__init__()
        check_window(interval_seconds, misses, who="heartbeat settings")
        if not every > 0:
            raise ValueError(f"the failure sweep interval must be > 0 s, got {every}")
        self._sessions = sessions
        self.inbox = inbox
        self.interval_seconds = interval_seconds
        self.misses = misses
        self.every = every
        self.period = every

    def sweep(self) -> list[str]:
        """One round, in its own transaction: the names it declared failed."""
        checked_until = self.inbox.checked_until_datetime()
        in_flight = self.inbox.in_flight()
        with self._sessions() as session, session.begin():
            result = failures.judge(
                session,
                checked_until=checked_until,
                listening_since=self.inbox.listening_since_datetime(),
                answered=self.inbox.answers(),
                interval_seconds=self.interval_seconds,
                misses=self.misses,
            )
            names = [p.name for p in result.failed]
        for name in names:
            log.warning(
                "participant %s failed: no heartbeat for %g s x %d; fenced",
                name,
                self.interval_seconds,
                self.misses,
            )
        for name, by_clock, checked in result.held_back:
            # The service itself is behind: what a judge by the clock would have blamed on B.
            log.warning(
                "held back: %s silent %.3f s by the clock, only %.3f s as checked "
                "(%d heartbeat(s) in flight)",
                name,
                by_clock,
                checked,
                in_flight,
            )
        return names
