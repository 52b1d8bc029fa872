from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.db import keyset
from app.models import Movement, MovementStatus, Task


def get(session: Session, movement_id: int, *, for_update: bool = False) -> Movement | None:
    query = select(Movement).where(Movement.id == movement_id)
    return session.scalar(query.with_for_update() if for_update else query)


def task_for_update(session: Session, task_id: int) -> Task | None:
    # Serialises every decision about one task on PostgreSQL: at most one movement in flight.
    return session.scalar(select(Task).where(Task.id == task_id).with_for_update())


def prepared_for_task(session: Session, task_id: int) -> Movement | None:
    return session.scalar(
        select(Movement).where(
            Movement.task_id == task_id, Movement.status == MovementStatus.prepared
        )
    )


def stale_prepared(session: Session, prepared_before: datetime) -> list[Movement]:
    """Prepared movements older than ``prepared_before``, locked; rows another transaction
    holds (a commit in progress) are skipped rather than waited for."""
    return list(
        session.scalars(
            select(Movement)
            .where(
                Movement.status == MovementStatus.prepared,
                Movement.prepared_at < prepared_before,
            )
            .order_by(Movement.id)
            .with_for_update(skip_locked=True)
        )
    )


def committed_for_task(session: Session, task_id: int) -> list[Movement]:
    return list(
        session.scalars(
            select(Movement)
            .where(Movement.task_id == task_id, Movement.status == MovementStatus.committed)
            .order_by(Movement.finished_at, Movement.id)
        )
    )


def visible_to(
    session: Session,
    participant_id: int | None,
    *,
    limit: int = 500,
    before_id: int | None = None,
) -> list[Movement]:
    """Movements from or to a participant (all for None), newest first; a page of them
    older than ``before_id`` when given."""
    query = keyset.after(
        select(Movement),
        [Movement.id],
        None if before_id is None else (before_id,),
        descending=True,
    )
    query = query.order_by(Movement.id.desc()).limit(limit)
    if participant_id is not None:
        query = query.where(
            or_(Movement.from_id == participant_id, Movement.to_id == participant_id)
        )
    return list(session.scalars(query))


def for_task(session: Session, task_id: int) -> list[Movement]:
    """Every movement of one task in any status, oldest first (a task's history)."""
    return list(
        session.scalars(select(Movement).where(Movement.task_id == task_id).order_by(Movement.id))
    )
