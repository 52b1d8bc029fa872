"""Task use cases: declare, list, change load, pin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.db.base import utcnow
from app.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.models import Offer, OfferStatus, Task
from app.movements import replicas
from app.movements import repository as movements_repo
from app.participants import repository as participants
from app.tasks import repository
from app.tasks.catalogue import (
    CATALOGUE,
    STREAM_SCHEMAS,
    FragmentError,
    Upstream,
    served_where_it_runs,
)
from app.tasks.definition import TaskDefinition, define_task, event_time
from app.tasks.naming import naming_error
from app.tasks.schemas import AnalysisReport, TaskCreate, TaskInputRead, TaskRead, TaskUpdate
from app.work.spec import parse_ddl


def to_read(session: Session, tasks: list[Task]) -> list[TaskRead]:
    inputs = repository.inputs_by_name(
        session, {str(i["task"]) for t in tasks for i in t.inputs or []}
    )
    # Where each input's stream is served (catalogue.served_where_it_runs).
    served = {
        name: row.host_id if served_where_it_runs(row.fragment) else row.owner_id
        for name, row in inputs.items()
    }
    names = participants.names_by_id(
        session, [t.owner_id for t in tasks] + [t.host_id for t in tasks] + list(served.values())
    )
    copies = repository.active_copy_holders(session, inputs)
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
            fragment=t.fragment,
            params=dict(t.params or {}),
            inputs=[
                _input_read(str(i["task"]), inputs, served, names, copies) for i in t.inputs or []
            ],
            work=dict(t.work or {}),
            synthetic=t.synthetic,
            output_schema=_output_schema(t.fragment, t.output_schema),
            analysis_error=t.analysis_error,
        )
        for t in tasks
    ]


def _output_schema(fragment: str | None, stored: str | None) -> str | None:
    # Catalogue tasks declared before output schemas were recorded carry their kind's.
    if stored is not None:
        return stored
    kind = CATALOGUE.get(fragment or "")
    return None if kind is None else STREAM_SCHEMAS[kind.writes]


def _input_read(
    task: str,
    inputs: dict[str, repository.InputRow],
    served: dict[str, int],
    names: dict[int, str],
    copies: dict[str, list[str]],
) -> TaskInputRead:
    found = inputs.get(task)
    return TaskInputRead(
        task=task,
        fragment=None if found is None else found.fragment,
        columns=None if found is None else _output_schema(found.fragment, found.output_schema),
        event_time=event_time({} if found is None else found.work),
        served_by=None if task not in served else names[served[task]],
        active_copies=copies.get(task, []),
    )


def _upstream(session: Session) -> Callable[[str], Upstream | None]:
    def upstream(name: str) -> Upstream | None:
        found = repository.get_by_name(session, name)
        if found is None:
            return None
        owner_name = participants.names_by_id(session, [found.owner_id])[found.owner_id]
        return Upstream(
            name=found.name,
            owner=owner_name,
            fragment=found.fragment,
            work=dict(found.work or {}),
            output_schema=_output_schema(found.fragment, found.output_schema),
        )

    return upstream


def _defined(session: Session, data: TaskCreate, owner: Principal) -> TaskDefinition:
    """The task as the registry stores it, once every field is valid (app.tasks.definition).
    A files source's directory is on the owner's host, which the registry cannot see: the
    owner's agent reports it missing as the task's analysis_error."""
    assert owner.name is not None
    try:
        return define_task(
            data.definition(), name=data.name, owner=owner.name, upstream=_upstream(session)
        )
    except FragmentError as exc:
        raise InvalidInput(exc.detail, field=exc.field) from exc


def declare(session: Session, principal: Principal, data: TaskCreate) -> Task:
    if principal.participant_id is None:
        raise InvalidInput("tasks belong to participants; the admin key owns none")
    # Before any lookup: a name outside the caller's own namespace is refused for what it is,
    # so the answer never depends on another participant's tasks.
    wrong = naming_error(data.name, principal.name)
    if wrong is not None:
        raise InvalidInput(wrong, field="name")
    if repository.get_by_name(session, data.name) is not None:
        raise Conflict(f"a task named {data.name!r} already exists", field="name")
    defined = _defined(session, data, principal)
    task = Task(
        name=data.name,
        owner_id=principal.participant_id,
        host_id=principal.participant_id,
        load=defined.load,
        fragment=defined.fragment,
        params=dict(defined.params),
        inputs=[{"task": name} for name in defined.inputs],
        work=defined.work.to_json(),
        synthetic=defined.synthetic,
        output_schema=defined.output_ddl,
    )
    session.add(task)
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action="task.created",
        entity_type="task",
        entity_id=task.id,
        detail=created_detail(task),
    )
    return task


def created_detail(task: Task) -> dict[str, Any]:
    """What the audit log keeps of a new task (the API's and a file's alike)."""
    detail: dict[str, Any] = {"name": task.name, "load": task.load}
    if task.fragment is not None:
        detail.update(fragment=task.fragment, params=task.params, inputs=task.inputs)
    if task.work:
        detail.update(work=task.work, inputs=task.inputs, output_schema=task.output_schema)
    return detail


def report_analysis(
    session: Session, principal: Principal, name: str, report: AnalysisReport
) -> Task:
    """The owner's agent's Spark analysis of the task's work: an error (None clears the one
    recorded) and, when given, the output schema Spark found. Only the owner (its agent)
    reports; anyone else who can see the task gets 403, others 404."""
    task = get_visible(session, principal, name)
    if principal.participant_id != task.owner_id:
        raise Forbidden("only the task's owner (its agent) reports its analysis", field="name")
    schema = None
    if report.output_schema is not None:
        try:
            schema = parse_ddl(report.output_schema, ("output_schema",)).ddl()
        except FragmentError as exc:
            raise InvalidInput(exc.detail, field=exc.field) from exc
    changed: dict[str, Any] = {}
    if task.analysis_error != report.error:
        changed["analysis_error"] = report.error
    if schema is not None and task.output_schema != schema:
        changed["output_schema"] = schema
    if not changed:
        return task
    for key, value in changed.items():
        setattr(task, key, value)
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action="task.analysed",
        entity_type="task",
        entity_id=task.id,
        detail={"name": task.name, **changed},
    )
    return task


def _sees(principal: Principal, task: Task) -> bool:
    return principal.is_admin or principal.participant_id in (task.owner_id, task.host_id)


def get_visible(session: Session, principal: Principal, name: str) -> Task:
    task = repository.get_by_name(session, name)
    if task is None or not _sees(principal, task):
        raise NotFound(f"task {name!r} not found", field="name")
    return task


def get_readable(session: Session, principal: Principal, name: str) -> Task:
    """A task as ``GET /v1/tasks/{name}`` shows it: to its owner and host (and admins), and to a
    participant about to run it: the target of its prepared movement, which must know the
    fragment to instantiate it, the holder of one of its replicas, which takes it over when its
    host fails, or the recipient of an open offer naming it, which decides whether it runs that
    kind of fragment. Anyone else gets 404, as for an unknown name."""
    task = repository.get_by_name(session, name)
    if task is not None and (_sees(principal, task) or _about_to_run(session, principal, task)):
        return task
    raise NotFound(f"task {name!r} not found", field="name")


def _about_to_run(session: Session, principal: Principal, task: Task) -> bool:
    if principal.participant_id is None:
        return False
    prepared = movements_repo.prepared_for_task(session, task.id)
    if prepared is not None and prepared.to_id == principal.participant_id:
        return True
    # The holder of a replica runs it the moment its host fails: it follows the task's record.
    if replicas.hosted_by(session, task.id, principal.participant_id) is not None:
        return True
    return any(task.id in offer.task_ids for offer in _open_offers_to(session, principal))


def _open_offers_to(session: Session, principal: Principal) -> list[Offer]:
    return list(
        session.scalars(
            select(Offer).where(
                Offer.to_id == principal.participant_id, Offer.status == OfferStatus.open
            )
        )
    )


def update(session: Session, principal: Principal, name: str, data: TaskUpdate) -> Task:
    """Change a task's declared load (its owner or an admin) and/or pin it (an admin).

    Checked in full before anything changes: a body the caller may only partly apply changes
    nothing. A task the caller cannot see is 404, as an unknown one.
    """
    task = get_visible(session, principal, name)
    if data.pinned is not None and not principal.is_admin:
        raise Forbidden("only an admin pins or unpins a task", field="pinned")
    if data.load is not None and not (
        principal.is_admin or principal.participant_id == task.owner_id
    ):
        raise Forbidden("only the task's owner (or an admin) declares its load", field="load")
    if data.load is not None:
        set_load(session, task, data.load, actor=principal.actor)
    if data.pinned is not None:
        set_pinned(session, name, data.pinned, actor=principal.actor)
    return task


def set_load(session: Session, task: Task, load: float, *, actor: str) -> Task:
    """A new declared load (e.g. the task's input rate changed). Payments for the time so far
    are charged at the old load first, so the change counts from now on."""
    from app.movements.payments import accrue_task

    if load < 0:
        raise InvalidInput(f"load must be >= 0, got {load}", field="load")
    if task.load == load:
        return task
    accrue_task(session, task, utcnow())
    previous, task.load = task.load, load
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="task.load_changed",
        entity_type="task",
        entity_id=task.id,
        detail={"name": task.name, "from": previous, "to": load},
    )
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
