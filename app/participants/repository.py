"""Every participant query in one place."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import and_, bindparam, exists, func, or_, select
from sqlalchemy.orm import Session

from app.db import keyset
from app.models import (
    Contract,
    ContractStatus,
    Movement,
    MovementStatus,
    Participant,
    ParticipantFailure,
    ParticipantSample,
    ParticipantStatus,
    Replica,
    Task,
)
from app.participants import name_cache

# The lookups of a request (a key on a key-cache miss, a partner by name, names by id) are
# built once: building a statement and its cache key costs more CPU than running it.
_BY_KEY_HASH = select(Participant).where(Participant.api_key_hash == bindparam("key_hash"))
_BY_PREVIOUS_KEY_HASH = select(Participant).where(
    Participant.previous_key_hash == bindparam("key_hash"),
    Participant.previous_key_expires_at > bindparam("now"),
)
_BY_NAME = select(Participant).where(Participant.name == bindparam("name"))
_NAMES_BY_ID = select(Participant.id, Participant.name).where(
    Participant.id.in_(bindparam("ids", expanding=True))
)


def get_by_key_hash(session: Session, key_hash: str) -> Participant | None:
    return session.scalar(_BY_KEY_HASH, {"key_hash": key_hash})


def get_by_previous_key_hash(session: Session, key_hash: str, now: datetime) -> Participant | None:
    """The participant whose key before its last rotation this is, while it is still valid."""
    return session.scalar(_BY_PREVIOUS_KEY_HASH, {"key_hash": key_hash, "now": now})


def get_by_name(session: Session, name: str) -> Participant | None:
    return session.scalar(_BY_NAME, {"name": name})


def by_names(session: Session, names: Iterable[str]) -> dict[str, Participant]:
    rows = session.scalars(select(Participant).where(Participant.name.in_(list(names))))
    return {p.name: p for p in rows}


def all_participants(
    session: Session, *, after: tuple[str, int] | None = None, limit: int | None = None
) -> list[Participant]:
    """Every participant by name (then id); a page after the key ``after`` when given."""
    query = keyset.after(select(Participant), [Participant.name, Participant.id], after)
    return list(session.scalars(query.order_by(Participant.name, Participant.id).limit(limit)))


def names_by_id(session: Session, ids: Iterable[int]) -> dict[int, str]:
    """Names of the participants ``ids``; those the application already knows cost no query
    (``app/participants/name_cache.py``)."""
    wanted = set(ids)
    names = name_cache.cached_names(session, wanted)
    missing = list(wanted.difference(names))
    if missing:
        rows = session.execute(_NAMES_BY_ID, {"ids": missing})
        found = {pid: name for pid, name in rows}
        name_cache.read_names(session, found)
        names.update(found)
    return names


def latest_samples(session: Session) -> dict[int, ParticipantSample]:
    """Each participant's most recent load sample (for the admin overview)."""
    newest = (
        select(ParticipantSample.participant_id, func.max(ParticipantSample.id).label("id"))
        .group_by(ParticipantSample.participant_id)
        .subquery()
    )
    rows = session.scalars(
        select(ParticipantSample).join(newest, ParticipantSample.id == newest.c.id)
    )
    return {s.participant_id: s for s in rows}


def recent_samples(
    session: Session, participant_id: int, *, limit: int = 300
) -> list[ParticipantSample]:
    """A participant's latest ``limit`` load samples, oldest first (for charts)."""
    rows = session.scalars(
        select(ParticipantSample)
        .where(ParticipantSample.participant_id == participant_id)
        .order_by(ParticipantSample.id.desc())
        .limit(limit)
    )
    return list(reversed(list(rows)))


# What ties two participants together, each the reason one may look up the other's endpoint.


def have_active_contract(session: Session, a: int, b: int, now: datetime) -> bool:
    return bool(
        session.scalar(
            select(
                exists().where(
                    or_(
                        and_(Contract.proposer_id == a, Contract.partner_id == b),
                        and_(Contract.proposer_id == b, Contract.partner_id == a),
                    ),
                    Contract.status == ContractStatus.active,
                    Contract.ends_at > now,
                )
            )
        )
    )


def host_each_others_tasks(session: Session, a: int, b: int) -> bool:
    """One hosts a task (its primary or a replica) that the other owns."""
    primary = exists().where(
        or_(
            and_(Task.owner_id == a, Task.host_id == b),
            and_(Task.owner_id == b, Task.host_id == a),
        )
    )
    replica = (
        select(Replica.id)
        .join(Task, Task.id == Replica.task_id)
        .where(
            or_(
                and_(Task.owner_id == a, Replica.participant_id == b),
                and_(Task.owner_id == b, Replica.participant_id == a),
            )
        )
        .exists()
    )
    return bool(session.scalar(select(or_(primary, replica))))


def receiving_task_of(session: Session, me: int, owner: int) -> bool:
    """A prepared movement brings a task ``owner`` owns to ``me``: the new host will read its
    inputs from and write its output to the owner's endpoint, contract with the owner or not
    (the last hop of a chain)."""
    return bool(
        session.scalar(
            select(
                exists().where(
                    Movement.to_id == me,
                    Movement.status == MovementStatus.prepared,
                    Movement.task_id == Task.id,
                    Task.owner_id == owner,
                )
            )
        )
    )


def moving_between(session: Session, a: int, b: int) -> bool:
    """A prepared movement has one as its source and the other as its target."""
    return bool(
        session.scalar(
            select(
                exists().where(
                    or_(
                        and_(Movement.from_id == a, Movement.to_id == b),
                        and_(Movement.from_id == b, Movement.to_id == a),
                    ),
                    Movement.status == MovementStatus.prepared,
                )
            )
        )
    )


def silent_members(session: Session, heard_before: datetime) -> list[Participant]:
    """Active participants not yet marked failed whose last heartbeat is no later than
    ``heard_before``, locked; a row a heartbeat's transaction holds is skipped (that heartbeat
    is news the next round reads). Never-heard participants are not judged: no agent runs them."""
    query = (
        select(Participant)
        .where(
            Participant.failed_at.is_(None),
            Participant.last_heartbeat_at.is_not(None),
            Participant.last_heartbeat_at <= heard_before,
            Participant.status == ParticipantStatus.active,
        )
        .order_by(Participant.id)
        .with_for_update(skip_locked=True)
    )
    return list(session.scalars(query))


def prepared_movements_to(session: Session, participant_id: int) -> list[Movement]:
    """Prepared movements the participant was to commit, locked (skipping rows held elsewhere)."""
    query = (
        select(Movement)
        .where(Movement.status == MovementStatus.prepared, Movement.to_id == participant_id)
        .order_by(Movement.id)
        .with_for_update(skip_locked=True)
    )
    return list(session.scalars(query))


def open_failure(session: Session, participant_id: int) -> ParticipantFailure | None:
    return session.scalar(
        select(ParticipantFailure)
        .where(
            ParticipantFailure.participant_id == participant_id,
            ParticipantFailure.rejoined_at.is_(None),
        )
        .order_by(ParticipantFailure.id.desc())
        .limit(1)
    )
