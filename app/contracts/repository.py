"""Every contract query in one place."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.contracts.lifecycle import LIVE
from app.db import keyset
from app.models import Contract, ContractEvent, ContractStatus, LedgerEntry


def get(session: Session, contract_id: int, *, for_update: bool = False) -> Contract | None:
    query = select(Contract).where(Contract.id == contract_id)
    if for_update:
        # Serialises concurrent decisions on one contract on PostgreSQL; SQLite locks the file.
        query = query.with_for_update()
    return session.scalar(query)


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
    query = keyset.after(
        select(Contract), [Contract.id], None if after_id is None else (after_id,)
    ).order_by(Contract.id)
    if participant_id is not None:
        query = query.where(
            or_(Contract.proposer_id == participant_id, Contract.partner_id == participant_id)
        )
    if status is not None:
        query = query.where(Contract.status == status)
    return list(session.scalars(query.limit(limit)))


def due_to_expire(session: Session, participant_id: int | None, now: datetime) -> list[Contract]:
    """Live contracts (of a participant, or all) whose term ended: a list expires them first,
    so a status filter in SQL sees their real status."""
    query = select(Contract).where(
        Contract.status.in_([ContractStatus(s.value) for s in LIVE]), Contract.ends_at <= now
    )
    if participant_id is not None:
        query = query.where(
            or_(Contract.proposer_id == participant_id, Contract.partner_id == participant_id)
        )
    return list(session.scalars(query.order_by(Contract.id)))


def live_between(session: Session, a: int, b: int) -> Contract | None:
    return session.scalar(
        select(Contract).where(
            or_(
                (Contract.proposer_id == a) & (Contract.partner_id == b),
                (Contract.proposer_id == b) & (Contract.partner_id == a),
            ),
            Contract.status.in_([ContractStatus(s.value) for s in LIVE]),
        )
    )


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
    return list(
        session.scalars(
            select(LedgerEntry)
            .where(LedgerEntry.contract_id == contract_id)
            .order_by(LedgerEntry.id)
        )
    )
