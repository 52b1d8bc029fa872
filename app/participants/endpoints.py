"""/v1/participants"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request, Response, status

from app.api_route import api_router
from app.api_types import PathName
from app.auth.dependencies import (
    AdminPrincipal,
    CurrentParticipant,
    CurrentPrincipal,
    SessionDep,
    SettingsDep,
)
from app.errors import Forbidden
from app.pagination import PageRequest, page_request, paginate
from app.participants import failures, repository, service
from app.participants.inbox import HEARTBEAT_OF
from app.participants.schemas import (
    Heartbeat,
    HeartbeatAnswer,
    KeyRotated,
    ParticipantCreate,
    ParticipantCreated,
    ParticipantEndpoint,
    ParticipantPublic,
    ParticipantRead,
    ParticipantStatusUpdate,
    Rejoined,
)

router = api_router(prefix="/v1/participants", tags=["participants"])
ParticipantsPage = Annotated[PageRequest, Depends(page_request("participants", str, int))]


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


@router.post("/me/heartbeat", response_model=HeartbeatAnswer)
def heartbeat(
    body: Heartbeat,
    me: CurrentParticipant,
    session: SessionDep,
    settings: SettingsDep,
    request: Request,
) -> HeartbeatAnswer:
    """Report liveness, the agent's endpoint and, optionally, its load and marginal cost. The
    answer says whether the registry has declared this participant failed (``fenced``): then
    stop every fragment and replica you ran and ``POST /v1/participants/me/rejoin``."""
    participant = service.heartbeat(session, me, body)
    # For the failure sweeper: whose answer this is (app.participants.inbox).
    setattr(request.state, HEARTBEAT_OF, participant.id)
    read = ParticipantRead.model_validate(participant)
    return HeartbeatAnswer(
        **read.model_dump(),
        fenced=participant.failed_at is not None,
        heartbeat_interval_seconds=settings.heartbeat_interval_seconds,
        heartbeat_misses=settings.heartbeat_misses,
    )


@router.post("/me/rejoin", response_model=Rejoined)
def rejoin(me: CurrentParticipant, session: SessionDep) -> Rejoined:
    """End this participant's fence after a failure the registry declared: call it only once
    your agent stopped every fragment and replica it ran (a replica may have taken them over).
    Counts as a heartbeat; afterwards run what the registry says you host. Audited."""
    was_fenced = failures.rejoin(session, me)
    read = ParticipantRead.model_validate(me)
    return Rejoined(**read.model_dump(), was_fenced=was_fenced)


@router.post("/me/keys", response_model=KeyRotated, status_code=status.HTTP_201_CREATED)
def rotate_key(
    me: CurrentParticipant,
    principal: CurrentPrincipal,
    session: SessionDep,
    settings: SettingsDep,
    revoke_old: bool = Query(
        False, description="End the old key now instead of after the grace period."
    ),
) -> KeyRotated:
    """Issue a new API key (shown once, in this response). The old key keeps working for
    ``FEDLOAD_KEY_ROTATION_GRACE_SECONDS`` (default 600) so agents can switch without a gap,
    unless ``revoke_old=true``; audited. Only the current key may rotate: a key already
    replaced is refused (403) even inside its grace period."""
    if principal.by_previous_key:
        raise Forbidden(
            "this key has been replaced and only works until its grace period ends; "
            "rotate with the current key",
            field="Authorization",
        )
    rotated = service.rotate_key(
        session,
        me,
        grace_seconds=settings.key_rotation_grace_seconds,
        revoke_old=revoke_old,
        actor=principal.actor,
    )
    return KeyRotated(
        api_key=rotated.api_key, previous_key_valid_until=rotated.previous_key_valid_until
    )


@router.get("", response_model=list[ParticipantPublic])
def list_participants(
    _: CurrentPrincipal,
    session: SessionDep,
    settings: SettingsDep,
    page: ParticipantsPage,
    request: Request,
    response: Response,
) -> list[ParticipantPublic]:
    """Every participant's public profile and liveness (no capacities, cost models or keys),
    by name; a page of ``limit``, the next one at the ``Link: rel="next"`` header's address."""
    after = None if page.after is None else (str(page.after[0]), int(page.after[1]))
    found = repository.all_participants(session, after=after, limit=page.fetch)
    people = paginate(found, page, request, response, key=lambda p: (p.name, p.id))
    service.refresh_liveness(
        session,
        people,
        interval_seconds=settings.heartbeat_interval_seconds,
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
