from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.models import Task


def get_by_name(session: Session, name: str) -> Task | None:
    return session.scalar(select(Task).where(Task.name == name))


def visible_to(session: Session, participant_id: int | None) -> list[Task]:
    """Tasks a participant owns or hosts; every task for admins (None)."""
    query = select(Task).order_by(Task.name)
    if participant_id is not None:
        query = query.where(or_(Task.owner_id == participant_id, Task.host_id == participant_id))
    return list(session.scalars(query))


def fragments_by_name(session: Session, names: Iterable[str]) -> dict[str, str | None]:
    """The fragment each named task runs (None: a declared load)."""
    wanted = list(set(names))
    if not wanted:
        return {}
    return dict(
        session.execute(select(Task.name, Task.fragment).where(Task.name.in_(wanted))).all()
    )
