"""/v1/participants"""

from __future__ import annotations

from fastapi import APIRouter, status

from app.api_types import PathName
from app.auth.dependencies import (
    AdminPrincipal,
    CurrentParticipant,
    CurrentPrincipal,
    SessionDep,
    SettingsDep,
)
from app.participants import repository, service
from app.participants.schemas import (
    Heartbeat,
    ParticipantCreate,
    ParticipantCreated,
    ParticipantEndpoint,
    ParticipantPublic,
    ParticipantRead,
    ParticipantStatusUpdate,
)

router = APIRouter(prefix="/v1/participants", tags=["participants"])


@router.post("", response_model=ParticipantCreated, status_code=status.HTTP_201_CREATED)
def create_participant(
    body: ParticipantCreate, admin: AdminPrincipal, session: SessionDep
) -> ParticipantCreated:
    """Register a participant (admin only). The API key is returned once, in this response."""
    created = service.create_participant(session, body, actor=admin.actor)
    read = ParticipantRead.model_validate(created.participant)
    return ParticipantCreated(**read.model_dump(), api_key=created.api_key)


@router.get("/me", response_model=ParticipantRead)
def read_me(me: CurrentParticipant) -> ParticipantRead:
    """The calling participant, including its private cost model."""
    return ParticipantRead.model_validate(me)


@router.post("/me/heartbeat", response_model=ParticipantRead)
def heartbeat(body: Heartbeat, me: CurrentParticipant, session: SessionDep) -> ParticipantRead:
    """Report liveness, the agent's endpoint and, optionally, its load and marginal cost."""
    return ParticipantRead.model_validate(service.heartbeat(session, me, body))


@router.get("", response_model=list[ParticipantPublic])
def list_participants(
    _: CurrentPrincipal, session: SessionDep, settings: SettingsDep
) -> list[ParticipantPublic]:
    """Every participant's public profile and liveness (no capacities, cost models or keys)."""
    people = repository.all_participants(session)
    service.refresh_liveness(
        session,
        people,
        interval_seconds=settings.heartbeat_interval_seconds,
        misses=settings.heartbeat_misses,
    )
    return [ParticipantPublic.model_validate(p) for p in people]


@router.get("/{name}", response_model=ParticipantRead)
def read_participant(
    name: PathName, _: AdminPrincipal, session: SessionDep, settings: SettingsDep
) -> ParticipantRead:
    """One participant in full, with its current liveness (admin only)."""
    participant = service.get_participant(session, name)
    service.refresh_liveness(
        session,
        [participant],
        interval_seconds=settings.heartbeat_interval_seconds,
        misses=settings.heartbeat_misses,
    )
    return ParticipantRead.model_validate(participant)


@router.get("/{name}/endpoint", response_model=ParticipantEndpoint)
def read_endpoint(
    name: PathName, me: CurrentPrincipal, session: SessionDep, settings: SettingsDep
) -> ParticipantEndpoint:
    """Where ``name``'s agent serves its streams, and whether it is alive. For admins, ``name``
    itself, and participants that work with it: an active contract, a task one owns and the
    other hosts (or a replica of it), or a movement in flight between them. Anyone else gets
    404, as for an unknown name."""
    participant = service.endpoint_of(session, me, name)
    service.refresh_liveness(
        session,
        [participant],
        interval_seconds=settings.heartbeat_interval_seconds,
        misses=settings.heartbeat_misses,
    )
    return ParticipantEndpoint(
        name=participant.name, endpoint=participant.endpoint, liveness=participant.liveness
    )


@router.patch("/{name}", response_model=ParticipantRead)
def update_status(
    name: PathName, body: ParticipantStatusUpdate, admin: AdminPrincipal, session: SessionDep
) -> ParticipantRead:
    """Suspend or reinstate a participant (admin only); audited."""
    return ParticipantRead.model_validate(
        service.set_status(session, name, body.status, actor=admin.actor)
    )
