"""Contract negotiation use cases. Services flush, never commit."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Row, Table, bindparam, select
from sqlalchemy.orm import Session

from app.audit import sealing
from app.audit import service as audit
from app.audit.subjects import remember_parties
from app.auth.principal import Principal
from app.contracts import repository
from app.contracts.lifecycle import Action, ContractState, Status, is_due_to_expire, next_status
from app.contracts.schemas import (
    AvailabilityTerms,
    ContractCounter,
    ContractCreate,
    ContractEventRead,
    ContractRead,
    ContractTerms,
    LedgerEntryRead,
    LedgerRead,
)
from app.db.base import utcnow
from app.errors import Conflict, InvalidInput, NotFound
from app.models import Contract, ContractEvent, ContractStatus, LedgerEntry, Offer, OfferStatus
from app.participants import repository as participants

# A contract to answer with: the ORM object, or a row of the contracts table read or written as
# it is answered (``repository.get_row``, ``page_rows``, ``insert_row``, ``update_row``), with
# the same attribute names.
ContractView = Contract | Row[Any]


def terms_snapshot(contract: ContractView) -> dict[str, Any]:
    return {
        "price_min": contract.price_min,
        "price_max": contract.price_max,
        "starts_at": contract.starts_at.isoformat(),
        "ends_at": contract.ends_at.isoformat(),
        "min_move_seconds": contract.min_move_seconds,
        "availability": _availability(contract).model_dump(mode="json")
        if contract.recovery or contract.max_delay_seconds or contract.replica_hosting
        else None,
    }


def _availability(contract: ContractView) -> AvailabilityTerms:
    return AvailabilityTerms(
        recovery=contract.recovery,
        max_delay_seconds=contract.max_delay_seconds,
        replica_hosting=contract.replica_hosting,
    )


def _terms_values(terms: ContractTerms, now: datetime) -> dict[str, Any]:
    """The contracts table's columns for ``terms`` (the key order fixed: ``update_row``
    builds its statement once per set and order of columns)."""
    starts_at, ends_at = terms.term(now)
    if ends_at <= now:
        raise InvalidInput("the term has already ended", field="ends_at")
    availability = terms.availability or AvailabilityTerms()
    return {
        "price_min": terms.price_min,
        "price_max": terms.price_max,
        "starts_at": starts_at,
        "ends_at": ends_at,
        "min_move_seconds": terms.min_move_seconds,
        "recovery": availability.recovery,
        "max_delay_seconds": availability.max_delay_seconds,
        "replica_hosting": availability.replica_hosting,
    }


def _merged_terms(contract: ContractView, counter: ContractCounter) -> ContractTerms:
    """The terms a counter puts on the table: what it names, the rest as they stand."""
    given = {k: getattr(counter, k) for k in counter.model_fields_set if k != "version"}
    current = {
        "price_min": contract.price_min,
        "price_max": contract.price_max,
        "starts_at": contract.starts_at,
        "ends_at": contract.ends_at,
        "min_move_seconds": contract.min_move_seconds,
        "availability": _availability(contract),
    }
    merged = {**current, **{k: v for k, v in given.items() if v is not None}}
    if merged["price_max"] < merged["price_min"]:
        raise InvalidInput(
            f"price_max {merged['price_max']} is below price_min {merged['price_min']}",
            field="price_max" if "price_max" in given else "price_min",
        )
    if merged["ends_at"] <= merged["starts_at"]:
        raise InvalidInput("ends_at must be after starts_at", field="ends_at")
    return ContractTerms.model_construct(**merged)


def _state(contract: ContractView) -> ContractState:
    return ContractState(
        status=Status(contract.status.value),
        version=contract.version,
        parties=(contract.proposer_id, contract.partner_id),
        terms_author_id=contract.terms_author_id,
        ends_at=contract.ends_at,
    )


_EVENTS = cast(Table, ContractEvent.__table__)


def _log(
    session: Session, contract: ContractView, action: str, principal: Principal | None, actor: str
) -> None:
    """History and audit for one step; called after the write, so the version is the new one."""
    # A row nothing in the transaction reads again (the history's reader writes it first,
    # ``repository.events``): inserted with the step's audit entry, in its statement on
    # PostgreSQL, rather than by a round trip of its own (every negotiation step has one).
    sealing.insert_at_commit(
        session,
        _EVENTS,
        {
            "contract_id": contract.id,
            "version": contract.version,
            "action": action,
            "author_id": principal.participant_id if principal else None,
            "actor": actor,
            "terms": terms_snapshot(contract),
            "at": utcnow(),
        },
    )
    remember_parties(session, contract.id, (contract.proposer_id, contract.partner_id))
    audit.record(
        session,
        actor=actor,
        action=f"contract.{action}",
        entity_type="contract",
        entity_id=contract.id,
        detail={"version": contract.version, "status": contract.status.value},
    )


def to_read(session: Session, contract: ContractView) -> ContractRead:
    return to_read_many(session, [contract])[0]


def to_read_many(session: Session, contracts: Sequence[ContractView]) -> list[ContractRead]:
    """API views of ``contracts`` with one query for every party's name (not one per row)."""
    ids = {pid for c in contracts for pid in (c.proposer_id, c.partner_id)}
    ids |= {c.terms_author_id for c in contracts if c.terms_author_id is not None}
    names = participants.names_by_id(session, ids)
    return [_read(contract, names) for contract in contracts]


def _read(contract: ContractView, names: dict[int, str]) -> ContractRead:
    has_availability = contract.recovery or contract.max_delay_seconds or contract.replica_hosting
    return ContractRead(
        id=contract.id,
        status=contract.status,
        version=contract.version,
        proposer=names[contract.proposer_id],
        partner=names[contract.partner_id],
        terms_author=names.get(contract.terms_author_id) if contract.terms_author_id else None,
        price_min=contract.price_min,
        price_max=contract.price_max,
        starts_at=contract.starts_at,
        ends_at=contract.ends_at,
        min_move_seconds=contract.min_move_seconds,
        availability=_availability(contract) if has_availability else None,
        settled_amount=contract.settled_amount,
        created_at=contract.created_at,
        updated_at=contract.updated_at,
        ended_at=contract.ended_at,
    )


def propose(session: Session, principal: Principal, data: ContractCreate) -> Row[Any]:
    if principal.participant_id is None:
        raise InvalidInput("an admin cannot propose a contract; apply a contract file instead")
    partner = repository.partner_and_live_contract(session, principal.participant_id, data.partner)
    if partner is None:
        raise InvalidInput(f"unknown partner {data.partner!r}", field="partner")
    if partner.id == principal.participant_id:
        raise InvalidInput("a contract needs two parties; you named yourself", field="partner")
    if partner.live_id is not None:
        raise Conflict(
            f"you and {partner.name} already have contract {partner.live_id} "
            f"({partner.live_status.value})",
            field="partner",
        )
    values = _terms_values(data, utcnow())
    contract = repository.insert_row(
        session,
        {
            "proposer_id": principal.participant_id,
            "partner_id": partner.id,
            "status": ContractStatus.proposed,
            "terms_author_id": principal.participant_id,
            **values,
        },
    )
    _log(session, contract, "proposed", principal, principal.actor)
    return contract


def get_visible(
    session: Session, principal: Principal, contract_id: int, *, for_update: bool = False
) -> Contract:
    """The contract if the caller is a party or an admin; otherwise 404, never 403, so that
    outsiders cannot even learn that it exists."""
    contract = repository.get(session, contract_id, for_update=for_update)
    if contract is None or (
        not principal.is_admin and principal.participant_id not in contract.parties()
    ):
        raise NotFound(f"contract {contract_id} not found", field="id")
    return contract


def read_visible(session: Session, principal: Principal, contract_id: int) -> ContractRead:
    """The caller's view of a contract (``get_visible``'s rule), expired first if its term has
    ended. Read as a row: only a contract to expire is loaded as an object, to change."""
    row = repository.get_row(session, contract_id)
    if row is None or (
        not principal.is_admin and principal.participant_id not in (row.proposer_id, row.partner_id)
    ):
        raise NotFound(f"contract {contract_id} not found", field="id")
    if is_due_to_expire(_state(row), utcnow()):
        contract = get_visible(session, principal, contract_id)
        expire_if_due(session, contract)
        return to_read(session, contract)
    return to_read(session, row)


def expire_if_due(session: Session, contract: Contract, now: datetime | None = None) -> bool:
    if not is_due_to_expire(_state(contract), now or utcnow()):
        return False
    contract.status = ContractStatus.expired
    contract.ended_at = contract.ends_at
    session.flush()
    _log(session, contract, "expired", None, "system")
    return True


def list_for(
    session: Session,
    principal: Principal,
    status: ContractStatus | None,
    *,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[Row[Any]]:
    """A page of the caller's contracts by id, as rows to answer with; those past their term
    are expired first."""
    now = utcnow()
    page = repository.page_rows(
        session, principal.participant_id, now, status=status, after_id=after_id, limit=limit
    )
    # The page says whether anything is due; an empty page cannot, so it asks.
    if page and not page[0].any_due:
        return page
    due = repository.due_to_expire(session, principal.participant_id, now)
    if not due:
        return page
    for contract in due:
        expire_if_due(session, contract, now)
    return repository.page_rows(
        session, principal.participant_id, now, status=status, after_id=after_id, limit=limit
    )


def _decide(
    session: Session, principal: Principal, contract_id: int, action: Action, version: int
) -> tuple[Row[Any], ContractStatus]:
    """Check that ``action`` is allowed now; the caller writes the returned status
    (``repository.update_row``). The contract is read locked, as a row: the decision only
    reads it (``get_visible``'s rule for who may see it)."""
    contract = repository.get_row(session, contract_id, for_update=True)
    if contract is None or (
        not principal.is_admin
        and principal.participant_id not in (contract.proposer_id, contract.partner_id)
    ):
        raise NotFound(f"contract {contract_id} not found", field="id")
    if is_due_to_expire(_state(contract), utcnow()):
        expire_if_due(session, get_visible(session, principal, contract_id, for_update=True))
        raise Conflict(f"the contract expired at {contract.ends_at.isoformat()}", field="status")
    new_status = next_status(
        _state(contract), action, actor_id=principal.participant_id, sent_version=version
    )
    return contract, ContractStatus(new_status.value)


def counter(
    session: Session, principal: Principal, contract_id: int, data: ContractCounter
) -> Row[Any]:
    contract, new_status = _decide(session, principal, contract_id, Action.counter, data.version)
    terms = _merged_terms(contract, data)
    now = utcnow()
    values = {
        "status": new_status,
        **_terms_values(terms, now),
        "terms_author_id": principal.participant_id,
    }
    written = repository.update_row(session, contract, values, now)
    _log(session, written, "countered", principal, principal.actor)
    return written


def accept(session: Session, principal: Principal, contract_id: int, version: int) -> Row[Any]:
    contract, new_status = _decide(session, principal, contract_id, Action.accept, version)
    written = repository.update_row(session, contract, {"status": new_status}, utcnow())
    _log(session, written, "accepted", principal, principal.actor)
    return written


def reject(session: Session, principal: Principal, contract_id: int, version: int) -> Row[Any]:
    contract, new_status = _decide(session, principal, contract_id, Action.reject, version)
    now = utcnow()
    written = repository.update_row(session, contract, {"status": new_status, "ended_at": now}, now)
    _log(session, written, "rejected", principal, principal.actor)
    return written


_OPEN_OFFERS = select(Offer).where(
    Offer.contract_id == bindparam("contract_id"), Offer.status == OfferStatus.open
)


def terminate(session: Session, principal: Principal, contract_id: int, version: int) -> Row[Any]:
    """End an active contract: no future moves under it, open offers withdrawn, ledger settled."""
    from app.movements.payments import accrue_contract

    contract, new_status = _decide(session, principal, contract_id, Action.terminate, version)
    now = utcnow()
    # Charge hosting up to this instant while the contract is still active, then settle. All
    # queries come first, so the contract row changes once and its version rises by one.
    accrue_contract(session, contract.id, now)
    settled = _settle(session, contract)
    open_offers = list(session.scalars(_OPEN_OFFERS, {"contract_id": contract.id}))
    for offer in open_offers:
        offer.status = OfferStatus.withdrawn
        offer.decided_at = now
    # The offers' and the settlement's changes are flushed by this statement's autoflush.
    written = repository.update_row(
        session,
        contract,
        {"status": new_status, "ended_at": now, "settled_amount": settled},
        now,
    )
    _log(
        session,
        written,
        "terminated",
        principal if not principal.is_admin else None,
        principal.actor,
    )
    return written


# Hosting a task and hosting a replica are both paid load: both count in balances and settle.
PAYMENT_KINDS = ("accrual", "replica")


def _settle(session: Session, contract: ContractView) -> float:
    """Net the accrued payments between the two parties into one settlement entry."""
    a, b = contract.proposer_id, contract.partner_id
    owed_by_a = sum(
        e.amount if e.payer_id == a else -e.amount
        for e in repository.ledger(session, contract.id)
        if e.kind in PAYMENT_KINDS
    )
    if owed_by_a == 0:
        return 0.0
    payer, payee = (a, b) if owed_by_a > 0 else (b, a)
    session.add(
        LedgerEntry(
            contract_id=contract.id,
            payer_id=payer,
            payee_id=payee,
            kind="settlement",
            amount=abs(owed_by_a),
        )
    )
    return abs(owed_by_a)


def accrue(
    session: Session,
    contract: Contract,
    *,
    payer_id: int,
    payee_id: int,
    load: float,
    price: float,
    seconds: float,
    task_id: int | None = None,
) -> LedgerEntry:
    """Record a payment for ``load`` units hosted for ``seconds`` at ``price`` per unit-second."""
    if contract.status is not ContractStatus.active:
        raise Conflict(
            f"contract {contract.id} is {contract.status.value}, not active", field="status"
        )
    if {payer_id, payee_id} != set(contract.parties()):
        raise InvalidInput("payer and payee must be the contract's two parties", field="payer")
    if not contract.price_min <= price <= contract.price_max:
        raise InvalidInput(
            f"price {price} is outside the contract's range "
            f"[{contract.price_min}, {contract.price_max}]",
            field="price",
        )
    entry = LedgerEntry(
        contract_id=contract.id,
        payer_id=payer_id,
        payee_id=payee_id,
        task_id=task_id,
        kind="accrual",
        load=load,
        price=price,
        seconds=seconds,
        amount=load * price * seconds,
    )
    session.add(entry)
    session.flush()
    return entry


def history(
    session: Session,
    principal: Principal,
    contract_id: int,
    *,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[ContractEventRead]:
    """The contract's steps in order; a page of them after the event ``after_id`` if given."""
    return history_read(session, history_page(session, principal, contract_id, after_id, limit))


def history_page(
    session: Session,
    principal: Principal,
    contract_id: int,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[ContractEvent]:
    contract = get_visible(session, principal, contract_id)
    return repository.events(session, contract.id, after_id=after_id, limit=limit)


def history_read(session: Session, events: list[ContractEvent]) -> list[ContractEventRead]:
    names = participants.names_by_id(session, [e.author_id for e in events if e.author_id])
    return [
        ContractEventRead(
            version=e.version,
            action=e.action,
            author=names.get(e.author_id) if e.author_id else None,
            actor=e.actor,
            terms=e.terms,
            at=e.at,
        )
        for e in events
    ]


def ledger(session: Session, principal: Principal, contract_id: int) -> LedgerRead:
    contract = get_visible(session, principal, contract_id)
    entries = repository.ledger(session, contract.id)
    names = participants.names_by_id(session, contract.parties())
    balances: dict[str, float] = defaultdict(float)
    for name in names.values():
        balances[name] = 0.0
    total = 0.0
    for e in entries:
        if e.kind in PAYMENT_KINDS:
            balances[names[e.payee_id]] += e.amount
            balances[names[e.payer_id]] -= e.amount
            total += e.amount
    return LedgerRead(
        contract_id=contract.id,
        entries=[
            LedgerEntryRead(
                id=e.id,
                kind=e.kind,
                payer=names[e.payer_id],
                payee=names[e.payee_id],
                task_id=e.task_id,
                load=e.load,
                price=e.price,
                seconds=e.seconds,
                amount=e.amount,
                at=e.at,
            )
            for e in entries
        ],
        balances=dict(balances),
        total_paid=total,
    )
