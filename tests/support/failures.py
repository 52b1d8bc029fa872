"""Declaring a participant failed in a test that runs no agent: its last heartbeat is dated an
hour back, then one round of the registry's own failure rule (``app.participants.failures``)
declares and fences it, as the service's sweeper would once the window closed."""

from __future__ import annotations

from datetime import timedelta

from app.db.base import utcnow
from app.db.session import unit_of_work
from app.models import Participant
from app.participants import failures


def declare_failed(db_url: str, name: str) -> None:
    with unit_of_work(db_url) as session:
        participant = session.query(Participant).filter_by(name=name).one()
        participant.last_heartbeat_at = utcnow() - timedelta(hours=1)
    with unit_of_work(db_url) as session:
        # The service's own sweeper may have declared it first: then this round finds nothing.
        failures.sweep(session, checked_until=utcnow(), interval_seconds=1, misses=3)
    with unit_of_work(db_url) as session:
        failed_at = session.query(Participant).filter_by(name=name).one().failed_at
    assert failed_at is not None, f"{name} was not declared failed"
