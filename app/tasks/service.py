"""Task use cases: declare, list, pin."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.errors import Conflict, InvalidInput, NotFound
from app.models import Task
from app.participants import repository as participants
from app.tasks import repository
from app.tasks.schemas import TaskCreate, TaskRead


def to_read(session: Session, tasks: list[Task]) -> list[TaskRead]:
    names = participants.names_by_id(
        session, [t.owner_id for t in tasks] + [t.host_id for t in tasks]
    )
    return [
        TaskRead(
            id=t.id,
            name=t.name,
            owner=names[t.owner_id],
            host=names[t.host_id],
            load=t.load,
            contract_id=t.contract_id,
            price=t.price,
            host_since=t.host_since,
            pinned=t.pinned,
            lease_epoch=t.lease_epoch,
        )
        for t in tasks
    ]


def declare(session: Session, principal: Principal, data: TaskCreate) -> Task:
    if principal.participant_id is None:
        raise InvalidInput("tasks belong to participants; the admin key owns none")
    if repository.get_by_name(session, data.name) is not None:
        raise Conflict(f"a task named {data.name!r} already exists", field="name")
    task = Task(
        name=data.name,
        owner_id=principal.participant_id,
        host_id=principal.participant_id,
        load=data.load,
    )
    session.add(task)
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action="task.created",
        entity_type="task",
        entity_id=task.id,
        detail={"name": task.name, "load": task.load},
    )
    return task


def get_visible(session: Session, principal: Principal, name: str) -> Task:
    task = repository.get_by_name(session, name)
    if task is None or (
        not principal.is_admin and principal.participant_id not in (task.owner_id, task.host_id)
    ):
        raise NotFound(f"task {name!r} not found", field="name")
    return task


def set_pinned(session: Session, name: str, pinned: bool, *, actor: str) -> Task:
    """Pin a task so the market leaves it where it is (or unpin it)."""
    task = repository.get_by_name(session, name)
    if task is None:
        raise NotFound(f"task {name!r} not found", field="name")
    if task.pinned != pinned:
        task.pinned = pinned
        session.flush()
        audit.record(
            session,
            actor=actor,
            action="task.pinned" if pinned else "task.unpinned",
            entity_type="task",
            entity_id=task.id,
            detail={"name": name},
        )
    return task
