"""/v1/offers: BPM offers with partial acceptance. Each participant sees only its own."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request, Response, status

from app.api_route import api_router
from app.api_types import PathId
from app.auth.dependencies import CurrentPrincipal, SessionDep
from app.models import OfferStatus
from app.offers import service
from app.offers.schemas import OfferAccept, OfferCreate, OfferDecision, OfferRead
from app.pagination import PageRequest, page_request, paginate

router = api_router(prefix="/v1/offers", tags=["market"])
OffersPage = Annotated[PageRequest, Depends(page_request("offers", int))]


def _one(session: SessionDep, offer: object) -> OfferRead:
    return service.to_read(session, [offer])[0]  # type: ignore[list-item]


@router.post(
    "", response_model=OfferRead, response_model_by_alias=True, status_code=status.HTTP_201_CREATED
)
def create(body: OfferCreate, me: CurrentPrincipal, session: SessionDep) -> OfferRead:
    """Offer tasks you host to the other party of an active contract, at a price in its range."""
    return _one(session, service.create(session, me, body))


@router.get("", response_model=list[OfferRead], response_model_by_alias=True)
def list_offers(
    me: CurrentPrincipal,
    session: SessionDep,
    page: OffersPage,
    request: Request,
    response: Response,
    status_: OfferStatus | None = Query(None, alias="status"),
) -> list[OfferRead]:
    """Offers you made or received (every offer for an admin) by id; a page of ``limit``, the
    next one at the ``Link: rel="next"`` header's address."""
    found = service.list_for(session, me, status_, after_id=page.after_value, limit=page.fetch)
    return service.to_read(session, paginate(found, page, request, response, key=lambda o: (o.id,)))


@router.get("/{offer_id}", response_model=OfferRead, response_model_by_alias=True)
def read(offer_id: PathId, me: CurrentPrincipal, session: SessionDep) -> OfferRead:
    return _one(session, service.get_visible(session, me, offer_id))


@router.post("/{offer_id}/accept", response_model=OfferRead, response_model_by_alias=True)
def accept(
    offer_id: PathId, body: OfferAccept, me: CurrentPrincipal, session: SessionDep
) -> OfferRead:
    """Take all the offered tasks, or the subset named in ``tasks``; prepares their movements.

    With ``reservation_price`` (the least you take per unit) and the giver's own, the registry
    sets the agreed price between the two inside the contract's range; 409 when none works."""
    return _one(
        session,
        service.accept(
            session,
            me,
            offer_id,
            body.version,
            body.tasks,
            body.replicas,
            reservation_price=body.reservation_price,
        ),
    )


@router.post("/{offer_id}/reject", response_model=OfferRead, response_model_by_alias=True)
def reject(
    offer_id: PathId, body: OfferDecision, me: CurrentPrincipal, session: SessionDep
) -> OfferRead:
    return _one(session, service.reject(session, me, offer_id, body.version))


@router.post("/{offer_id}/withdraw", response_model=OfferRead, response_model_by_alias=True)
def withdraw(
    offer_id: PathId, body: OfferDecision, me: CurrentPrincipal, session: SessionDep
) -> OfferRead:
    return _one(session, service.withdraw(session, me, offer_id, body.version))
