"""Every participant query in one place."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Participant, ParticipantSample


def get_by_key_hash(session: Session, key_hash: str) -> Participant | None:
    return session.scalar(select(Participant).where(Participant.api_key_hash == key_hash))


def get_by_name(session: Session, name: str) -> Participant | None:
    return session.scalar(select(Participant).where(Participant.name == name))


def by_names(session: Session, names: Iterable[str]) -> dict[str, Participant]:
    rows = session.scalars(select(Participant).where(Participant.name.in_(list(names))))
    return {p.name: p for p in rows}


def all_participants(session: Session) -> list[Participant]:
    return list(session.scalars(select(Participant).order_by(Participant.name)))


def names_by_id(session: Session, ids: Iterable[int]) -> dict[int, str]:
    wanted = list(set(ids))
    if not wanted:
        return {}
    rows = session.execute(
        select(Participant.id, Participant.name).where(Participant.id.in_(wanted))
    )
    return {pid: name for pid, name in rows}


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
