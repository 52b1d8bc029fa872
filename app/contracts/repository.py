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

from sqlalchemy import Row, Select, Table, and_, bindparam, exists, insert, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from app.audit import sealing
from app.contracts.lifecycle import LIVE
from app.db import keyset
from app.models import Contract, ContractEvent, ContractStatus, LedgerEntry, Participant

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
_ROW_BY_ID_LOCKED = _ROW_BY_ID.with_for_update()


def get_row(session: Session, contract_id: int, *, for_update: bool = False) -> Row[Any] | None:
    """The contract as a row to read from, or, locked, to change with ``update_row``."""
    query = _ROW_BY_ID_LOCKED if for_update else _ROW_BY_ID
    return session.execute(query, {"contract_id": contract_id}).first()


# The negotiation's writes, as statements of the contracts table that answer with the row
# written (RETURNING), rather than through ORM objects: loading an object and flushing its
# changes through the unit of work cost more CPU than the statements (bench/api/README.md,
# session 25). The version rises by one at each change, as the mapper's version_id_col makes
# it for the ORM's writes (federation files, expiry).
_INSERT = insert(_TABLE).returning(*_TABLE.c)


def insert_row(session: Session, values: dict[str, Any]) -> Row[Any]:
    """A new contract (version 1) from ``values`` (column: value; the table's defaults for the
    rest), as the row inserted."""
    return session.execute(_INSERT, {**values, "version": 1}).one()


@functools.cache
def _update(columns: tuple[str, ...]) -> Any:
    """The update of ``columns`` (and the version and ``updated_at``) of one contract at one
    version; built once per set of columns."""
    changed = {c: bindparam(f"new_{c}", type_=_TABLE.c[c].type) for c in columns}
    return (
        update(_TABLE)
        .where(_TABLE.c.id == bindparam("contract_id"), _TABLE.c.version == bindparam("seen"))
        .values(
            {
                **changed,
                "version": _TABLE.c.version + 1,
                "updated_at": bindparam("new_updated_at", type_=_TABLE.c.updated_at.type),
            }
        )
        .returning(*_TABLE.c)
    )


def update_row(
    session: Session, contract: Row[Any], values: dict[str, Any], now: datetime
) -> Row[Any]:
    """Change ``values`` (column: value) of ``contract``, a row read locked (``get_row``), as
    of ``now``; the row written. StaleDataError (409) if the contract is no longer at the
    version read, as the ORM's versioned update raises it."""
    params = {f"new_{column}": value for column, value in values.items()}
    params.update(contract_id=contract.id, seen=contract.version, new_updated_at=now)
    written = session.execute(_update(tuple(values)), params).first()
    if written is None:
        raise StaleDataError(f"contract {contract.id} is no longer at version {contract.version}")
    return written


# The flag a page of rows carries (``page_rows``): whether any contract it could show is live
# past its term, to expire before the page may be answered.
ANY_DUE = "any_due"
# An alias of its own: the page's contracts and these are unrelated (never correlated).
_due = _TABLE.alias("due")
_DUE_ROWS = select(_due.c.id).where(_due.c.status.in_(_LIVE), _due.c.ends_at <= bindparam("now"))
_ANY_DUE = {
    False: exists(_DUE_ROWS).label(ANY_DUE),
    True: exists(
        _DUE_ROWS.where(
            or_(_due.c.proposer_id == bindparam("party"), _due.c.partner_id == bindparam("party"))
        )
    ).label(ANY_DUE),
}


@functools.cache
def _page(
    of_party: bool, by_status: bool, after: bool, limited: bool, rows: bool = False
) -> Select[Any]:
    """The page query for one combination of filters, built the first time it is asked for.
    As rows, each row also says whether any contract of the party (of anyone for an admin) is
    due to expire (``ANY_DUE``): the expiry check of a list rides on its page query, which
    PostgreSQL and SQLite both run once per statement (uncorrelated), not once per row."""
    query = select(_TABLE, _ANY_DUE[of_party]) if rows else select(Contract)
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
    now: datetime,
    *,
    status: ContractStatus | None = None,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[Row[Any]]:
    """``for_participant``'s contracts as rows to read from (``get_row``), each with
    ``ANY_DUE``: whether any of the participant's live contracts had ended by ``now``."""
    query = _page(
        participant_id is not None,
        status is not None,
        after_id is not None,
        limit is not None,
        rows=True,
    )
    values = {
        "party": participant_id,
        "status": status,
        "after_id": after_id,
        "limit": limit,
        "now": now,
    }
    return list(session.execute(query, {k: v for k, v in values.items() if v is not None}))


def due_to_expire(session: Session, participant_id: int | None, now: datetime) -> list[Contract]:
    """Live contracts (of a participant, or all) whose term ended: a list expires them first,
    so a status filter in SQL sees their real status."""
    if participant_id is None:
        return list(session.scalars(_DUE_ANYONE, {"now": now}))
    return list(session.scalars(_DUE_OF_PARTY, {"now": now, "party": participant_id}))


def live_between(session: Session, a: int, b: int) -> Contract | None:
    return session.scalar(_LIVE_BETWEEN, {"a": a, "b": b})


_PARTICIPANTS = cast(Table, Participant.__table__)
# A proposal's two lookups in one statement: the partner by name and the live contract, if
# any, between it and the proposer (at most one: uq_contracts_live_pair).
_PARTNER_AND_LIVE: Select[Any] = (
    select(
        _PARTICIPANTS.c.id,
        _PARTICIPANTS.c.name,
        _TABLE.c.id.label("live_id"),
        _TABLE.c.status.label("live_status"),
    )
    .select_from(
        _PARTICIPANTS.outerjoin(
            _TABLE,
            and_(
                or_(
                    (_TABLE.c.proposer_id == bindparam("me"))
                    & (_TABLE.c.partner_id == _PARTICIPANTS.c.id),
                    (_TABLE.c.proposer_id == _PARTICIPANTS.c.id)
                    & (_TABLE.c.partner_id == bindparam("me")),
                ),
                _TABLE.c.status.in_(_LIVE),
            ),
        )
    )
    .where(_PARTICIPANTS.c.name == bindparam("name"))
    .limit(1)
)


def partner_and_live_contract(session: Session, me: int, name: str) -> Row[Any] | None:
    """The participant named ``name`` (``id``, ``name``) and the live contract between it and
    ``me`` (``live_id``, ``live_status``, both None when there is none); None when no
    participant has that name."""
    return session.execute(_PARTNER_AND_LIVE, {"me": me, "name": name}).first()


def events(
    session: Session, contract_id: int, *, after_id: int | None = None, limit: int | None = None
) -> list[ContractEvent]:
    """A contract's history in order; a page of it after the event ``after_id`` when given."""
    sealing.insert_queued(session)  # this transaction's own steps too (``service._log``)
    query = keyset.after(
        select(ContractEvent).where(ContractEvent.contract_id == contract_id),
        [ContractEvent.id],
        None if after_id is None else (after_id,),
    )
    return list(session.scalars(query.order_by(ContractEvent.id).limit(limit)))


def ledger(session: Session, contract_id: int) -> list[LedgerEntry]:
    return list(session.scalars(_LEDGER, {"contract_id": contract_id}))
