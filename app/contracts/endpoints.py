"""/v1/contracts: propose, counter, accept, reject, terminate; history and ledger."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request, Response, status
from pydantic import BaseModel

from app.api_route import api_router
from app.api_types import PathId
from app.auth.dependencies import CurrentPrincipal, SessionDep
from app.contracts import service
from app.contracts.schemas import (
    ContractCounter,
    ContractCreate,
    ContractEventRead,
    ContractRead,
    LedgerRead,
    VersionBody,
)
from app.etags import NOT_MODIFIED, conditional
from app.models import ContractStatus
from app.pagination import PageRequest, page_request, paginate

router = api_router(prefix="/v1/contracts", tags=["contracts"])
HistoryPage = Annotated[PageRequest, Depends(page_request("contract history", int))]
ContractsPage = Annotated[PageRequest, Depends(page_request("contracts", int))]

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such contract, or you are not one of its parties."}
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "Stale version or illegal transition; the message says which."}
}


@router.post("", response_model=ContractRead, status_code=status.HTTP_201_CREATED)
def propose(body: ContractCreate, me: CurrentPrincipal, session: SessionDep) -> ContractRead:
    """Propose a contract to a partner. It starts as ``proposed``, version 1."""
    return service.to_read(session, service.propose(session, me, body))


@router.get("", response_model=list[ContractRead])
def list_contracts(
    me: CurrentPrincipal,
    session: SessionDep,
    page: ContractsPage,
    request: Request,
    response: Response,
    status_: ContractStatus | None = Query(default=None, alias="status"),
) -> list[ContractRead]:
    """Your contracts (every contract for an admin) by id, optionally filtered by status; a
    page of ``limit``, the next one at the ``Link: rel="next"`` header's address."""
    found = service.list_for(session, me, status_, after_id=page.after_value, limit=page.fetch)
    shown = paginate(found, page, request, response, key=lambda c: (c.id,))
    return service.to_read_many(session, shown)


@router.get("/{contract_id}", response_model=ContractRead, responses={**NOT_FOUND, **NOT_MODIFIED})
def read_contract(
    contract_id: PathId,
    me: CurrentPrincipal,
    session: SessionDep,
    request: Request,
    response: Response,
) -> BaseModel | Response:
    """One contract, with an ``ETag``; ``If-None-Match`` with it answers 304 while unchanged."""
    return conditional(request, response, service.read_visible(session, me, contract_id))


@router.post(
    "/{contract_id}/counter", response_model=ContractRead, responses={**NOT_FOUND, **CONFLICT}
)
def counter(
    contract_id: PathId, body: ContractCounter, me: CurrentPrincipal, session: SessionDep
) -> ContractRead:
    """Answer the terms on the table with new terms. ``version`` must be the current one."""
    return service.to_read(session, service.counter(session, me, contract_id, body))


@router.post(
    "/{contract_id}/accept", response_model=ContractRead, responses={**NOT_FOUND, **CONFLICT}
)
def accept(
    contract_id: PathId, body: VersionBody, me: CurrentPrincipal, session: SessionDep
) -> ContractRead:
    """Accept the other party's terms; the contract becomes ``active``."""
    return service.to_read(session, service.accept(session, me, contract_id, body.version))


@router.post(
    "/{contract_id}/reject", response_model=ContractRead, responses={**NOT_FOUND, **CONFLICT}
)
def reject(
    contract_id: PathId, body: VersionBody, me: CurrentPrincipal, session: SessionDep
) -> ContractRead:
    """Reject the other party's terms; the negotiation ends."""
    return service.to_read(session, service.reject(session, me, contract_id, body.version))


@router.post(
    "/{contract_id}/terminate", response_model=ContractRead, responses={**NOT_FOUND, **CONFLICT}
)
def terminate(
    contract_id: PathId, body: VersionBody, me: CurrentPrincipal, session: SessionDep
) -> ContractRead:
    """End an active contract (either party): no future moves, ledger settled."""
    return service.to_read(session, service.terminate(session, me, contract_id, body.version))


@router.get("/{contract_id}/history", response_model=list[ContractEventRead], responses=NOT_FOUND)
def history(
    contract_id: PathId,
    me: CurrentPrincipal,
    session: SessionDep,
    page: HistoryPage,
    request: Request,
    response: Response,
) -> list[ContractEventRead]:
    """Every proposal, counter and decision, with author, version and time, oldest first; a
    page of ``limit``, the next one at the ``Link: rel="next"`` header's address."""
    found = service.history_page(session, me, contract_id, page.after_value, page.fetch)
    shown = paginate(found, page, request, response, key=lambda e: (e.id,))
    return service.history_read(session, shown)


@router.get("/{contract_id}/ledger", response_model=LedgerRead, responses=NOT_FOUND)
def ledger(contract_id: PathId, me: CurrentPrincipal, session: SessionDep) -> LedgerRead:
    """Payments under the contract and each party's net balance."""
    return service.ledger(session, me, contract_id)
