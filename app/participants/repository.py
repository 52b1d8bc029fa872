"""Every participant query in one place."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Participant


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
