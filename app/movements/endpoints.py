"""/v1/movements: two-phase relocations (prepared, then committed or aborted)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Response, status

from app.api_route import api_router
from app.api_types import PathId
from app.auth.dependencies import CurrentPrincipal, SessionDep, SettingsDep
from app.movements import repository, service
from app.movements.schemas import MovementCommit, MovementCreate, MovementRead
from app.pagination import PageRequest, page_request, paginate

router = api_router(prefix="/v1/movements", tags=["market"])
MovementsPage = Annotated[PageRequest, Depends(page_request("movements", int))]


@router.post(
    "",
    response_model=MovementRead,
    response_model_by_alias=True,
    status_code=status.HTTP_201_CREATED,
)
def request(
    body: MovementCreate, me: CurrentPrincipal, session: SessionDep, settings: SettingsDep
) -> MovementRead:
    """Prepare a relocation outside the market: failover, replica switch or reconciliation.

    The target is the task's owner or a partner under an active contract with the owner (403
    otherwise). A failover or replica switch is asked for by the host of the task's replica or
    standby that takes it over (403 otherwise), only while the registry sees the current host
    failed (409 otherwise); a reconciliation by the owner. A task you cannot see is 404."""
    movement = service.request(session, me, body.task, body.to, body.reason)
    return service.to_read(session, [movement], lease_seconds=settings.movement_lease_seconds)[0]


@router.get("", response_model=list[MovementRead], response_model_by_alias=True)
def list_movements(
    me: CurrentPrincipal,
    session: SessionDep,
    page: MovementsPage,
    request: Request,
    response: Response,
    settings: SettingsDep,
) -> list[MovementRead]:
    """Movements from or to you, newest first (every movement for an admin); a page of
    ``limit``, the next (older) one at the ``Link: rel="next"`` header's address."""
    found = repository.visible_to(
        session, me.participant_id, limit=page.fetch, before_id=page.after_value
    )
    shown = paginate(found, page, request, response, key=lambda m: (m.id,))
    return service.to_read(session, shown, lease_seconds=settings.movement_lease_seconds)


@router.get("/{movement_id}", response_model=MovementRead, response_model_by_alias=True)
def read_movement(
    movement_id: PathId, me: CurrentPrincipal, session: SessionDep, settings: SettingsDep
) -> MovementRead:
    """One movement: for its source, its target and admins (404 for anyone else)."""
    found = service.get_visible(session, me, movement_id)
    return service.to_read(session, [found], lease_seconds=settings.movement_lease_seconds)[0]


@router.post("/{movement_id}/commit", response_model=MovementRead, response_model_by_alias=True)
def commit(
    movement_id: PathId, body: MovementCommit, me: CurrentPrincipal, session: SessionDep
) -> MovementRead:
    """The new host has resumed the task: it becomes the host of record at ``epoch``."""
    return service.to_read(session, [service.commit(session, me, movement_id, body.epoch)])[0]


@router.post("/{movement_id}/abort", response_model=MovementRead, response_model_by_alias=True)
def abort(movement_id: PathId, me: CurrentPrincipal, session: SessionDep) -> MovementRead:
    """Give up a prepared movement; the task stays with its current host."""
    return service.to_read(session, [service.abort(session, me, movement_id)])[0]
