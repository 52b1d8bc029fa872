"""Rows queued to be inserted with a transaction's audit entries (``sealing.insert_at_commit``):
written exactly when the transaction commits, in the order queued, never after a rollback."""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import Table
from sqlalchemy.orm import Session

from app.audit import sealing
from app.audit import service as audit
from app.db.base import utcnow
from app.db.session import get_engine
from app.models import Contract, ContractEvent, ContractStatus, Participant

EVENTS = cast(Table, ContractEvent.__table__)


def _contract(session: Session) -> int:
    a = Participant(name="A", capacity=1.0, api_key_hash="a" * 64)
    b = Participant(name="B", capacity=1.0, api_key_hash="b" * 64)
    session.add_all([a, b])
    session.flush()
    now = utcnow()
    contract = Contract(
        proposer_id=a.id,
        partner_id=b.id,
        status=ContractStatus.proposed,
        price_min=0.8,
        price_max=1.0,
        starts_at=now,
        ends_at=now.replace(year=now.year + 1),
    )
    session.add(contract)
    session.flush()
    return contract.id


def _event(contract_id: int, action: str) -> dict[str, Any]:
    return {
        "contract_id": contract_id,
        "version": 1,
        "action": action,
        "author_id": None,
        "actor": "test",
        "terms": {},
        "at": utcnow(),
    }


def _actions(db_url: str) -> list[str]:
    with get_engine(db_url).connect() as conn:
        return list(conn.scalars(sa.text("SELECT action FROM contract_events ORDER BY id")))


def test_queued_rows_are_written_with_the_commit_in_order(db_url: str) -> None:
    with Session(get_engine(db_url)) as session:
        contract_id = _contract(session)
        session.commit()
        for action in ("first", "second"):  # two rows: one statement each, in order
            sealing.insert_at_commit(session, EVENTS, _event(contract_id, action))
        audit.record(
            session, actor="test", action="test", entity_type="contract", entity_id=contract_id
        )
        assert _actions(db_url) == []
        session.commit()
    assert _actions(db_url) == ["first", "second"]


def test_a_row_is_written_without_an_audit_entry_too(db_url: str) -> None:
    with Session(get_engine(db_url)) as session:
        contract_id = _contract(session)
        sealing.insert_at_commit(session, EVENTS, _event(contract_id, "alone"))
        session.commit()
    assert _actions(db_url) == ["alone"]


def test_a_rollback_drops_the_rows_queued_inside_it(db_url: str) -> None:
    with Session(get_engine(db_url)) as session:
        contract_id = _contract(session)
        session.commit()
        sealing.insert_at_commit(session, EVENTS, _event(contract_id, "kept"))
        savepoint = session.begin_nested()
        sealing.insert_at_commit(session, EVENTS, _event(contract_id, "undone"))
        savepoint.rollback()
        session.commit()
        sealing.insert_at_commit(session, EVENTS, _event(contract_id, "rolled back"))
        session.rollback()
        session.commit()
    assert _actions(db_url) == ["kept"]
