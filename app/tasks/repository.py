from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.db import keyset
from app.models import Participant, Replica, ReplicaTechnique, Task


def get_by_name(session: Session, name: str) -> Task | None:
    return session.scalar(select(Task).where(Task.name == name))


def visible_to(
    session: Session,
    participant_id: int | None,
    *,
    after: tuple[str, int] | None = None,
    limit: int | None = None,
) -> list[Task]:
    """Tasks a participant owns or hosts; every task for admins (None); by name (then id), a
    page after the key ``after`` when given."""
    query = keyset.after(select(Task), [Task.name, Task.id], after).order_by(Task.name, Task.id)
    if participant_id is not None:
        query = query.where(or_(Task.owner_id == participant_id, Task.host_id == participant_id))
    return list(session.scalars(query.limit(limit)))


class InputRow(NamedTuple):
    """What a reader's record shows of a task it reads."""

    fragment: str | None
    owner_id: int
    host_id: int
    work: dict[str, Any]
    output_schema: str | None


def inputs_by_name(session: Session, names: Iterable[str]) -> dict[str, InputRow]:
    """Per named task: the fragment it runs (None: its own work or a declared load), its
    owner's and its host's ids, its work and its output stream's schema."""
    wanted = list(set(names))
    if not wanted:
        return {}
    rows = session.execute(
        select(
            Task.name, Task.fragment, Task.owner_id, Task.host_id, Task.work, Task.output_schema
        ).where(Task.name.in_(wanted))
    )
    return {
        name: InputRow(fragment, owner, host, dict(work or {}), schema)
        for name, fragment, owner, host, work, schema in rows
    }


def active_copy_holders(session: Session, names: Iterable[str]) -> dict[str, list[str]]:
    """Per named task with active replicas: the participants running them, by name. Each
    keeps the task's stable output in a log of its own (``<task>.out@<holder>``)."""
    wanted = list(set(names))
    if not wanted:
        return {}
    rows = session.execute(
        select(Task.name, Participant.name)
        .join(Replica, Replica.task_id == Task.id)
        .join(Participant, Participant.id == Replica.participant_id)
        .where(Task.name.in_(wanted), Replica.technique == ReplicaTechnique.active_standby)
        .order_by(Task.name, Participant.name)
    )
    found: dict[str, list[str]] = {}
    for task, holder in rows:
        found.setdefault(task, []).append(holder)
    return found
