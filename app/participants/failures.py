"""The registry declares participants failed, fences them, and lets them rejoin.

A participant is failed when a heartbeat window (``interval x misses``) closed with no
heartbeat from it, as far as the registry has checked (``app.participants.inbox``): the one
rule of ``app.availability.detector``. Services flush, never commit: the sweeper's round owns
the transaction.

The fence, at once and in the same transaction:
- ``failed_at`` is set and ``liveness`` becomes ``failed``; a ``participant_failures`` row and
  a ``participant.failed`` audit entry (the admin's event) record it;
- every prepared movement it was to commit (as the target) is aborted: the task stays with its
  host and may move again at once. A movement *from* it is left to its target, which may hold
  the verified checkpoint already (the move that saves the task: commit, or abort when it
  cannot reach the source; the stale-movement sweeper ends it otherwise);
- from then on it may not commit a movement, report a replica's state or make an offer (409,
  field ``participant``): whatever it held is no longer its to act on as a host;
- its heartbeats are still answered, with ``fenced: true``, so that its agent learns it.

The rule to come back (``rejoin``): an agent told it is fenced stops every fragment and replica
it ran (their state is no longer authoritative: a replica may have taken over), then calls
``POST /v1/participants/me/rejoin``. The registry ends the fence (and counts the call as a
heartbeat); the agent then runs what the registry says it hosts, from their checkpoints, as a
restarted agent would. Tasks failed over meanwhile are the new hosts'; the rest are still its.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.availability.detector import PeerStatus, check_window, verdict
from app.db.base import utcnow
from app.errors import Conflict
from app.models import MovementStatus, Participant, ParticipantFailure
from app.participants import repository

_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class SweepResult:
    failed: list[Participant]
    # Silent past the window by the clock, not failed: the service had not checked the window
    # to its end (a heartbeat of theirs may be on its way through a slow service). Each one is a
    # false suspicion a judge by the clock alone would have made, unless it fails later.
    held_back: list[tuple[str, float, float]]  # (name, silent by the clock, silent as checked)


def sweep(
    session: Session,
    *,
    checked_until: datetime,
    interval_seconds: float,
    misses: int,
    listening_since: datetime | None = None,
    answered: Mapping[int, datetime] | None = None,
    now: datetime | None = None,
) -> list[Participant]:
    """Mark failed (and fence) every member whose window closed unanswered up to
    ``checked_until``; returns them. A window counts from ``listening_since`` at the earliest
    (when this service started: its own outage is no participant's silence) and from the
    participant's last answer (``answered``, see ``judge``)."""
    return judge(
        session,
        checked_until=checked_until,
        interval_seconds=interval_seconds,
        misses=misses,
        listening_since=listening_since,
        answered=answered,
        now=now,
    ).failed


def judge(
    session: Session,
    *,
    checked_until: datetime,
    interval_seconds: float,
    misses: int,
    listening_since: datetime | None = None,
    answered: Mapping[int, datetime] | None = None,
    now: datetime | None = None,
) -> SweepResult:
    """``sweep``, also naming the members it held back (see ``SweepResult``). ``answered``:
    when this service sent each participant's last heartbeat answer; its window runs from
    there when that is later than the recorded heartbeat (the agent waits for the answer)."""
    window = check_window(interval_seconds, misses, who="heartbeat settings")
    now = now or utcnow()
    result = SweepResult(failed=[], held_back=[])
    # The cutoff lets the database skip everyone heard within the window; the rule decides.
    cutoff = max(now, checked_until) - timedelta(seconds=window)
    for participant in repository.silent_members(session, cutoff):
        assert participant.last_heartbeat_at is not None
        last = max(participant.last_heartbeat_at, (answered or {}).get(participant.id, _NEVER))
        status = verdict(
            last_heard=last.timestamp(),
            watched_since=max(last, listening_since or last).timestamp(),
            verified_until=checked_until.timestamp(),
            now=now.timestamp(),
            interval=interval_seconds,
            misses=misses,
        )
        if status is PeerStatus.FAILED:
            fence(session, participant, now=now, window_seconds=window)
            result.failed.append(participant)
        else:
            by_clock = (now - last).total_seconds()
            checked = (checked_until - last).total_seconds()
            result.held_back.append((participant.name, by_clock, checked))
    return result


def fence(
    session: Session, participant: Participant, *, now: datetime, window_seconds: float
) -> ParticipantFailure:
    participant.failed_at = now
    previous, participant.liveness = participant.liveness, "failed"
    aborted = repository.prepared_movements_to(session, participant.id)
    for movement in aborted:
        movement.status, movement.finished_at = MovementStatus.aborted, now
        audit.record(
            session,
            actor="system",
            action="movement.aborted",
            entity_type="movement",
            entity_id=movement.id,
            detail={"why": f"{participant.name} failed", "participant": participant.name},
        )
    failure = ParticipantFailure(
        participant_id=participant.id,
        failed_at=now,
        last_heartbeat_at=participant.last_heartbeat_at,
        aborted_movements=len(aborted),
    )
    session.add(failure)
    session.flush()
    last = participant.last_heartbeat_at
    audit.record(
        session,
        actor="system",
        action="participant.failed",
        entity_type="participant",
        entity_id=participant.id,
        detail={
            "from": previous,
            "to": "failed",
            "last_heartbeat_at": last.isoformat() if last else None,
            "window_seconds": window_seconds,
            "aborted_movements": [m.id for m in aborted],
        },
    )
    return failure


def rejoin(session: Session, participant: Participant, *, at: datetime | None = None) -> bool:
    """End ``participant``'s fence (it dropped what it ran, by the rule above); counts as a
    heartbeat. False when it was not fenced (nothing changes but the heartbeat's time)."""
    now = at or utcnow()
    participant.last_heartbeat_at = now
    if participant.failed_at is None:
        session.flush()
        return False
    failed_at, participant.failed_at = participant.failed_at, None
    participant.liveness = "online"
    failure = repository.open_failure(session, participant.id)
    if failure is not None:
        failure.rejoined_at = now
    session.flush()
    audit.record(
        session,
        actor=f"participant:{participant.name}",
        action="participant.rejoined",
        entity_type="participant",
        entity_id=participant.id,
        detail={"failed_at": failed_at.isoformat(), "rejoined_at": now.isoformat()},
    )
    return True


def check_not_fenced(participant: Participant | None, *, acting_as: str) -> None:
    """409 for a participant the registry declared failed, until it rejoins."""
    if participant is not None and participant.failed_at is not None:
        raise Conflict(
            f"{participant.name} was declared failed at {participant.failed_at.isoformat()} "
            f"and is fenced: it may not {acting_as} until it drops what it hosted and rejoins "
            "(POST /v1/participants/me/rejoin)",
            field="participant",
        )
