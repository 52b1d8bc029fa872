"""/v1/permits: the reconciliation arbiter beside the registry (issue 5, DPC).

Replicas of one fragment that cannot reach each other ask here before reconciling; at most one
holds the permit at a time, for a lease (``FEDLOAD_PERMIT_LEASE_SECONDS``) it renews by asking
again and ends by releasing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request, Response

from app.api_route import api_router
from app.auth.dependencies import AdminPrincipal, CurrentPrincipal, SessionDep, SettingsDep
from app.db.base import utcnow
from app.limits import NO_CONTROL
from app.pagination import PageRequest, page_request, paginate
from app.permits import service
from app.permits.schemas import PermitAsk, PermitDecision, PermitRead

router = api_router(prefix="/v1/permits", tags=["availability"])

Fragment = Annotated[str, Path(min_length=1, max_length=service.MAX_NAME, pattern=NO_CONTROL)]
PermitsPage = Annotated[PageRequest, Depends(page_request("permits", str))]


@router.post("/{fragment}/request", response_model=PermitDecision)
def request_permit(
    fragment: Fragment,
    body: PermitAsk,
    me: CurrentPrincipal,
    session: SessionDep,
    settings: SettingsDep,
) -> PermitDecision:
    """Ask for the fragment's permit: granted (or renewed, for the holder) until expires_at,
    or refused with the holder and when its lease ends.

    The fragment is a registered task's name of which the participant holds a copy, as its
    primary host or one of its replica hosts (404 otherwise, as for an unknown name), and it
    asks under its own copy's name: its participant name, or a node name of its choosing that
    is neither another participant's name nor a replica name the permit was granted under to
    another participant (403 naming the fragment and the participant otherwise). An admin may
    ask for any copy of a registered task. Refusals write nothing."""
    return service.request(
        session, me, fragment, body.replica, lease_seconds=settings.permit_lease_seconds
    )


@router.post("/{fragment}/release", response_model=PermitRead)
def release_permit(
    fragment: Fragment, body: PermitAsk, me: CurrentPrincipal, session: SessionDep
) -> PermitRead:
    """The holder gives the permit back (409 for any other replica); who may ask is as for
    ``request`` (404 for an unknown fragment or one the participant holds no copy of, 403 for
    naming another participant's copy)."""
    return service.release(session, me, fragment, body.replica)


@router.get("", response_model=list[PermitRead])
def list_permits(
    _: AdminPrincipal, session: SessionDep, page: PermitsPage, request: Request, response: Response
) -> list[PermitRead]:
    """Every fragment's permit: which replica holds it, until when, at which fence (admin); by
    fragment, a page of ``limit``, the next one at the ``Link: rel="next"`` header's address."""
    found = service.permits_page(session, after=page.after_value, limit=page.fetch)
    shown = paginate(found, page, request, response, key=lambda p: (p.fragment,))
    return service.to_read(session, shown, utcnow())
