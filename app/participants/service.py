"""Participant use cases. Services flush, never commit: the caller owns the transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.keys import hash_api_key, new_api_key
from app.auth.principal import Principal
from app.db.base import utcnow
from app.errors import Conflict, InvalidInput, NotFound
from app.market.cost_models import CostModelError, build_cost_model
from app.models import Participant, ParticipantSample, ParticipantStatus
from app.participants import repository
from app.participants.schemas import Heartbeat, ParticipantCreate


@dataclass(frozen=True)
class CreatedParticipant:
    participant: Participant
    api_key: str


def create_participant(
    session: Session, data: ParticipantCreate, *, actor: str
) -> CreatedParticipant:
    if repository.get_by_name(session, data.name) is not None:
        raise Conflict(f"a participant named {data.name!r} already exists", field="name")
    cost_model = data.cost_model or {"kind": "mm1"}
    try:
        build_cost_model(cost_model, data.capacity)
    except CostModelError as exc:
        raise InvalidInput(exc.detail, field=exc.field or "cost_model") from exc
    api_key = new_api_key()
    participant = Participant(
        name=data.name,
        capacity=data.capacity,
        profile=data.profile,
        cost_model=cost_model,
        api_key_hash=hash_api_key(api_key),
        status=ParticipantStatus.active,
    )
    session.add(participant)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="participant.created",
        entity_type="participant",
        entity_id=participant.id,
        detail={"name": data.name, "capacity": data.capacity},
    )
    return CreatedParticipant(participant=participant, api_key=api_key)


def get_participant(session: Session, name: str) -> Participant:
    participant = repository.get_by_name(session, name)
    if participant is None:
        raise NotFound(f"participant {name!r} not found", field="name")
    return participant


def endpoint_of(session: Session, principal: Principal, name: str) -> Participant:
    """``name``, for a caller with a reason to reach its agent: an admin, ``name`` itself, a
    party to an active contract with it, a participant hosting a task it owns or owning a task
    it hosts (primary or replica), the other side of a movement in flight with it, or the
    target of a movement in flight of a task it owns (a chain's last hop). Anyone
    else gets 404, as for an unknown name: who works with whom is private (DESIGN.md,
    invariant 2)."""
    participant = repository.get_by_name(session, name)
    me = principal.participant_id
    if participant is None or not (
        principal.is_admin or me == participant.id or _works_with(session, me, participant.id)
    ):
        raise NotFound(f"participant {name!r} not found", field="name")
    return participant


def _works_with(session: Session, me: int | None, other: int) -> bool:
    if me is None:
        return False
    return (
        repository.have_active_contract(session, me, other, utcnow())
        or repository.host_each_others_tasks(session, me, other)
        or repository.moving_between(session, me, other)
        or repository.receiving_task_of(session, me, other)
    )


def set_status(
    session: Session, name: str, status: ParticipantStatus, *, actor: str
) -> Participant:
    """Suspend or reinstate a participant. A suspended participant's key is refused."""
    participant = get_participant(session, name)
    if participant.status is status:
        return participant
    previous = participant.status
    participant.status = status
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="participant.suspended"
        if status is ParticipantStatus.suspended
        else "participant.reinstated",
        entity_type="participant",
        entity_id=participant.id,
        detail={"from": previous.value, "to": status.value},
    )
    return participant


@dataclass(frozen=True)
class RotatedKey:
    api_key: str
    previous_key_valid_until: datetime | None


def rotate_key(
    session: Session,
    participant: Participant,
    *,
    grace_seconds: float,
    revoke_old: bool,
    actor: str,
) -> RotatedKey:
    """Issue ``participant`` a new API key. The old one keeps working for ``grace_seconds``
    (so an agent can switch without a gap), or stops at once with ``revoke_old``. Only the
    current key is kept as the previous one: a key from before an earlier rotation stops now."""
    api_key = new_api_key()
    now = utcnow()
    valid_until = (
        None if revoke_old or grace_seconds <= 0 else now + timedelta(seconds=grace_seconds)
    )
    participant.previous_key_hash = participant.api_key_hash if valid_until else None
    participant.previous_key_expires_at = valid_until
    participant.api_key_hash = hash_api_key(api_key)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="participant.key_rotated",
        entity_type="participant",
        entity_id=participant.id,
        detail={
            "previous_key_valid_until": valid_until.isoformat() if valid_until else None,
            "revoke_old": revoke_old,
        },
    )
    return RotatedKey(api_key=api_key, previous_key_valid_until=valid_until)


def heartbeat(session: Session, participant: Participant, beat: Heartbeat) -> Participant:
    """Record a heartbeat, keep a load sample, and bring the participant's payments up to date.

    The heartbeat's time is when the service answers it, not when it arrived: an agent sends
    its next one after this answer, so its window runs from here (a heartbeat still on its way
    holds the failure sweeper back until then: ``app.participants.inbox``). A fenced
    participant's heartbeat is recorded and answered, but it stays failed until it rejoins
    (``app.participants.failures``)."""
    from app.movements.payments import accrue_participant

    now = utcnow()
    participant.last_heartbeat_at = now
    if participant.failed_at is None:
        participant.liveness = "online"
    if beat.endpoint is not None:
        participant.endpoint = beat.endpoint
    if beat.fragments is not None and participant.fragments != sorted(set(beat.fragments)):
        # What partners may offer it (app.market.runnable); kept until a heartbeat says again.
        participant.fragments = sorted(set(beat.fragments))
    if beat.load is not None:
        session.add(
            ParticipantSample(
                participant_id=participant.id,
                at=now,
                load=beat.load,
                marginal_cost=beat.marginal_cost,
                threshold=beat.threshold,
                node_state=beat.node_state,
            )
        )
    # A heartbeat keeps the ledgers current: the tasks the participant shed, and the replicas
    # it owns or hosts (a replica's load is paid like any other load).
    accrue_participant(session, participant.id, now)
    session.flush()
    return participant


def refresh_liveness(
    session: Session, people: list[Participant], *, interval_seconds: float
) -> None:
    """Bring each participant's shown liveness (online / suspect) up to date; audit every
    change. ``failed`` is the failure sweeper's alone (app.participants.failures)."""
    from app.participants.liveness import liveness

    now = utcnow()
    for participant in people:
        current = liveness(
            participant.last_heartbeat_at,
            now,
            interval_seconds=interval_seconds,
            failed_at=participant.failed_at,
        )
        if current != participant.liveness:
            audit.record(
                session,
                actor="system",
                action=f"participant.{current}",
                entity_type="participant",
                entity_id=participant.id,
                detail={"from": participant.liveness, "to": current},
            )
            participant.liveness = current
    session.flush()
