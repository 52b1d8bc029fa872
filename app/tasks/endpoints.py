"""/v1/tasks"""

from __future__ import annotations

from fastapi import APIRouter, status

from app.auth.dependencies import AdminPrincipal, CurrentPrincipal, SessionDep
from app.movements import repository as movements
from app.movements.schemas import LeaseRead
from app.participants import repository as participants
from app.tasks import repository, service
from app.tasks.schemas import TaskCreate, TaskPin, TaskRead

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


@router.post("", response_model=TaskRead, status_code=status.HTTP_201_CREATED)
def declare(body: TaskCreate, me: CurrentPrincipal, session: SessionDep) -> TaskRead:
    """Declare a task (query fragment) that you own and, for now, host."""
    return service.to_read(session, [service.declare(session, me, body)])[0]


@router.get("", response_model=list[TaskRead])
def list_tasks(me: CurrentPrincipal, session: SessionDep) -> list[TaskRead]:
    """Tasks you own or host (every task for an admin)."""
    return service.to_read(session, repository.visible_to(session, me.participant_id))


@router.get("/{name}", response_model=TaskRead)
def read_task(name: str, me: CurrentPrincipal, session: SessionDep) -> TaskRead:
    return service.to_read(session, [service.get_visible(session, me, name)])[0]


@router.patch("/{name}", response_model=TaskRead)
def pin_task(name: str, body: TaskPin, admin: AdminPrincipal, session: SessionDep) -> TaskRead:
    """Pin or unpin a task (admin only); audited."""
    return service.to_read(
        session, [service.set_pinned(session, name, body.pinned, actor=admin.actor)]
    )[0]


@router.get("/{name}/lease", response_model=LeaseRead)
def read_lease(name: str, me: CurrentPrincipal, session: SessionDep) -> LeaseRead:
    """Who hosts the task and at which epoch; a host whose epoch is older must stop writing."""
    task = service.get_visible(session, me, name)
    host = participants.names_by_id(session, [task.host_id])[task.host_id]
    moving = movements.prepared_for_task(session, task.id) is not None
    return LeaseRead(task=task.name, host=host, epoch=task.lease_epoch, moving=moving)
