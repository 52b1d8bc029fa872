"""/v1/replicas and /v1/tasks/{name}/replicas: replica placement and state."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Response, status

from app.api_route import api_router
from app.api_types import PathName
from app.auth.dependencies import CurrentPrincipal, SessionDep, SettingsDep
from app.movements import replicas
from app.movements.replica_schemas import ReplicaCreate, ReplicaRead, ReplicaStateUpdate
from app.pagination import PageRequest, page_request, paginate
from app.participants import repository as participants
from app.participants import service as participant_service

router = api_router(tags=["availability"])
ReplicasPage = Annotated[PageRequest, Depends(page_request("replicas", int, int))]


@router.post(
    "/v1/tasks/{name}/replicas",
    response_model=list[ReplicaRead],
    status_code=status.HTTP_201_CREATED,
)
def place(
    name: PathName, body: ReplicaCreate, me: CurrentPrincipal, session: SessionDep
) -> list[ReplicaRead]:
    """Give a task k replicas in total, on partners whose contracts allow replica hosting
    (never two on one participant); each replica's load is paid like hosted load."""
    created = replicas.place(session, me, name, body.k, body.technique)
    return replicas.to_read(session, created)


@router.get("/v1/replicas", response_model=list[ReplicaRead])
def list_replicas(
    me: CurrentPrincipal,
    session: SessionDep,
    settings: SettingsDep,
    page: ReplicasPage,
    request: Request,
    response: Response,
) -> list[ReplicaRead]:
    """Replicas with their DPC state (FAILED when the host stopped heartbeating): all of them
    for an admin, else those you host or whose task you own."""
    participant_service.refresh_liveness(
        session,
        participants.all_participants(session),
        interval_seconds=settings.heartbeat_interval_seconds,
    )
    after = None if page.after is None else (int(page.after[0]), int(page.after[1]))
    found = replicas.visible(session, me, after=after, limit=page.fetch)
    shown = paginate(found, page, request, response, key=lambda r: (r.task_id, r.id))
    return replicas.to_read(session, shown)


@router.put("/v1/replicas/{task}/state", response_model=ReplicaRead)
def report_state(
    task: PathName, body: ReplicaStateUpdate, me: CurrentPrincipal, session: SessionDep
) -> ReplicaRead:
    """The hosting agent reports its replica's DPC state (STABLE, UP_FAILURE, STABILIZATION)."""
    replica = replicas.report_state(session, me, task, body.state, body.epoch)
    return replicas.to_read(session, [replica])[0]
