"""/v1/tasks"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Response, status
from pydantic import BaseModel

from app.api_route import api_router
from app.api_types import PathName
from app.auth.dependencies import CurrentPrincipal, SessionDep
from app.etags import NOT_MODIFIED, conditional
from app.movements import repository as movements
from app.movements.schemas import LeaseRead
from app.pagination import PageRequest, page_request, paginate
from app.participants import repository as participants
from app.tasks import repository, service
from app.tasks.schemas import AnalysisReport, TaskCreate, TaskRead, TaskUpdate

router = api_router(prefix="/v1/tasks", tags=["tasks"])
TasksPage = Annotated[PageRequest, Depends(page_request("tasks", str, int))]


@router.post("", response_model=TaskRead, status_code=status.HTTP_201_CREATED)
def declare(body: TaskCreate, me: CurrentPrincipal, session: SessionDep) -> TaskRead:
    """Declare a task that you own and, for now, host: a fragment of the catalogue
    (``fragment``, ``params``), your own work (a ``source`` with its schema, or ``sql`` /
    ``python`` over ``inputs``, tasks of yours whose output it reads, with an optional
    ``watermark`` and ``sink``), or a synthetic task (a declared ``load``, nothing runs). A SQL
    fragment is checked against its inputs' schemas; any bad field is a 422 naming it."""
    return service.to_read(session, [service.declare(session, me, body)])[0]


@router.get("", response_model=list[TaskRead])
def list_tasks(
    me: CurrentPrincipal, session: SessionDep, page: TasksPage, request: Request, response: Response
) -> list[TaskRead]:
    """Tasks you own or host (every task for an admin) by name; a page of ``limit``, the next
    one at the ``Link: rel="next"`` header's address."""
    after = None if page.after is None else (str(page.after[0]), int(page.after[1]))
    found = repository.visible_to(session, me.participant_id, after=after, limit=page.fetch)
    shown = paginate(found, page, request, response, key=lambda t: (t.name, t.id))
    return service.to_read(session, shown)


@router.get("/{name}", response_model=TaskRead, responses=NOT_MODIFIED)
def read_task(
    name: PathName, me: CurrentPrincipal, session: SessionDep, request: Request, response: Response
) -> BaseModel | Response:
    """One task, with an ``ETag``; ``If-None-Match`` with it answers 304 while unchanged."""
    task = service.to_read(session, [service.get_readable(session, me, name)])[0]
    return conditional(request, response, task)


@router.patch("/{name}", response_model=TaskRead)
def update_task(
    name: PathName, body: TaskUpdate, me: CurrentPrincipal, session: SessionDep
) -> TaskRead:
    """Change the declared ``load`` (the owner or an admin) and/or ``pinned`` (an admin: the
    market leaves a pinned task where it is); audited. A task you cannot see is 404."""
    return service.to_read(session, [service.update(session, me, name, body)])[0]


@router.put("/{name}/analysis", response_model=TaskRead)
def report_analysis(
    name: PathName, body: AnalysisReport, me: CurrentPrincipal, session: SessionDep
) -> TaskRead:
    """The task's owner (its agent) reports Spark's analysis of the task's work: ``error``
    (null clears the one recorded) and, when given, the ``output_schema`` Spark found, which
    replaces the registry's inferred one. Audited."""
    return service.to_read(session, [service.report_analysis(session, me, name, body)])[0]


@router.get("/{name}/lease", response_model=LeaseRead)
def read_lease(name: PathName, me: CurrentPrincipal, session: SessionDep) -> LeaseRead:
    """Who hosts the task and at which epoch; a host whose epoch is older must stop writing."""
    task = service.get_visible(session, me, name)
    host = participants.names_by_id(session, [task.host_id])[task.host_id]
    moving = movements.prepared_for_task(session, task.id) is not None
    return LeaseRead(task=task.name, host=host, epoch=task.lease_epoch, moving=moving)
