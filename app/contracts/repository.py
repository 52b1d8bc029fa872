"""Every contract query in one place.

The queries a request of the negotiation makes (a contract by id, a page of a participant's
contracts, the lists' expiry query, the live contract between two parties) are built once, with
bound parameters, instead of on every call: building a statement and its cache key cost more
CPU than running it (``bench/api/README.md``, 2026-11-26 s22).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Row, Select, Table, bindparam, or_, select
from sqlalchemy.orm import Session

from app.contracts.lifecycle import LIVE
from app.db import keyset
from app.models import Contract, ContractEvent, ContractStatus, LedgerEntry

_LIVE = [ContractStatus(s.value) for s in LIVE]
_PARTY = or_(Contract.proposer_id == bindparam("party"), Contract.partner_id == bindparam("party"))
_BY_ID = select(Contract).where(Contract.id == bindparam("contract_id"))
# Serialises concurrent decisions on one contract on PostgreSQL; SQLite locks the file.
_BY_ID_LOCKED = _BY_ID.with_for_update()
_DUE = select(Contract).where(Contract.status.in_(_LIVE), Contract.ends_at <= bindparam("now"))
_DUE_ANYONE = _DUE.order_by(Contract.id)
_DUE_OF_PARTY = _DUE.where(_PARTY).order_by(Contract.id)
_LIVE_BETWEEN = select(Contract).where(
    or_(
        (Contract.proposer_id == bindparam("a")) & (Contract.partner_id == bindparam("b")),
        (Contract.proposer_id == bindparam("b")) & (Contract.partner_id == bindparam("a")),
    ),
    Contract.status.in_(_LIVE),
)
_LEDGER = (
    select(LedgerEntry)
    .where(LedgerEntry.contract_id == bindparam("contract_id"))
    .order_by(LedgerEntry.id)
)


def get(session: Session, contract_id: int, *, for_update: bool = False) -> Contract | None:
    return session.scalar(_BY_ID_LOCKED if for_update else _BY_ID, {"contract_id": contract_id})


# The reads that answer with what they read: Core rows of the contracts table, with the
# model's attribute names, instead of ORM objects that would only be read once. Loading an ORM
# object (its state, the identity map) costs more CPU than the statement (bench/api/README.md).
_TABLE = cast(Table, Contract.__table__)
_ROW_BY_ID = select(_TABLE).where(_TABLE.c.id == bindparam("contract_id"))


def get_row(session: Session, contract_id: int) -> Row[Any] | None:
    """The contract as a row to read from, not to change."""
    return session.execute(_ROW_BY_ID, {"contract_id": contract_id}).first()


@functools.cache
def _page(
    of_party: bool, by_status: bool, after: bool, limited: bool, rows: bool = False
) -> Select[Any]:
    """The page query for one combination of filters, built the first time it is asked for."""
    query = select(_TABLE) if rows else select(Contract)
    if of_party:
        query = query.where(_PARTY)
    if by_status:
        query = query.where(Contract.status == bindparam("status"))
    if after:  # keyset: the rows after the last one the client saw (app/db/keyset.py)
        query = query.where(Contract.id > bindparam("after_id"))
    query = query.order_by(Contract.id)
    return query.limit(bindparam("limit")) if limited else query


def for_participant(
    session: Session,
    participant_id: int | None,
    *,
    status: ContractStatus | None = None,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[Contract]:
    """A participant's contracts, or every contract when ``participant_id`` is None (admins),
    by id; a page of them from ``after_id`` when given (ix_contracts_* of migration 0007)."""
    query = _page(
        participant_id is not None, status is not None, after_id is not None, limit is not None
    )
    values = {"party": participant_id, "status": status, "after_id": after_id, "limit": limit}
    return list(session.scalars(query, {k: v for k, v in values.items() if v is not None}))


def page_rows(
    session: Session,
    participant_id: int | None,
    *,
    status: ContractStatus | None = None,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[Row[Any]]:
    """``for_participant``'s contracts as rows to read from (``get_row``)."""
    query = _page(
        participant_id is not None,
        status is not None,
        after_id is not None,
        limit is not None,
        rows=True,
    )
    values = {"party": participant_id, "status": status, "after_id": after_id, "limit": limit}
    return list(session.execute(query, {k: v for k, v in values.items() if v is not None}))


def due_to_expire(session: Session, participant_id: int | None, now: datetime) -> list[Contract]:
    """Live contracts (of a participant, or all) whose term ended: a list expires them first,
    so a status filter in SQL sees their real status."""
    if participant_id is None:
        return list(session.scalars(_DUE_ANYONE, {"now": now}))
    return list(session.scalars(_DUE_OF_PARTY, {"now": now, "party": participant_id}))


def live_between(session: Session, a: int, b: int) -> Contract | None:
    return session.scalar(_LIVE_BETWEEN, {"a": a, "b": b})


def events(
    session: Session, contract_id: int, *, after_id: int | None = None, limit: int | None = None
) -> list[ContractEvent]:
    """A contract's history in order; a page of it after the event ``after_id`` when given."""
    query = keyset.after(
        select(ContractEvent).where(ContractEvent.contract_id == contract_id),
        [ContractEvent.id],
        None if after_id is None else (after_id,),
    )
    return list(session.scalars(query.order_by(ContractEvent.id).limit(limit)))


def ledger(session: Session, contract_id: int) -> list[LedgerEntry]:
    return list(session.scalars(_LEDGER, {"contract_id": contract_id}))
