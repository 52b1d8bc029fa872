"""Every contract query in one place."""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.contracts.lifecycle import LIVE
from app.models import Contract, ContractEvent, ContractStatus, LedgerEntry


def get(session: Session, contract_id: int, *, for_update: bool = False) -> Contract | None:
    query = select(Contract).where(Contract.id == contract_id)
    if for_update:
        # Serialises concurrent decisions on one contract on PostgreSQL; SQLite locks the file.
        query = query.with_for_update()
    return session.scalar(query)


def for_participant(
    session: Session, participant_id: int | None, *, status: ContractStatus | None = None
) -> list[Contract]:
    """A participant's contracts, or every contract when ``participant_id`` is None (admins)."""
    query = select(Contract).order_by(Contract.id)
    if participant_id is not None:
        query = query.where(
            or_(Contract.proposer_id == participant_id, Contract.partner_id == participant_id)
        )
    if status is not None:
        query = query.where(Contract.status == status)
    return list(session.scalars(query))


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


def events(session: Session, contract_id: int) -> list[ContractEvent]:
    return list(
        session.scalars(
            select(ContractEvent)
            .where(ContractEvent.contract_id == contract_id)
            .order_by(ContractEvent.id)
        )
    )


def ledger(session: Session, contract_id: int) -> list[LedgerEntry]:
    return list(
        session.scalars(
            select(LedgerEntry)
            .where(LedgerEntry.contract_id == contract_id)
            .order_by(LedgerEntry.id)
        )
    )
