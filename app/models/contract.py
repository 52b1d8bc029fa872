from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class ContractStatus(enum.StrEnum):
    proposed = "proposed"
    countered = "countered"
    active = "active"
    rejected = "rejected"
    expired = "expired"
    terminated = "terminated"


class Recovery(enum.StrEnum):
    gap = "gap"
    rollback = "rollback"
    precise = "precise"


LIVE_SQL = "status IN ('proposed', 'countered', 'active')"


def _ordered_party(low: str, high: str) -> str:
    return f"\nCASE\n    WHEN proposer_id < partner_id THEN {low}\n    ELSE {high}\nEND"


class Contract(Base):
    """A bilateral, price-bounded agreement: load moves between its parties at a price inside
    [price_min, price_max] per unit load per second."""

    __tablename__ = "contracts"
    __table_args__ = (
        CheckConstraint("price_min > 0", name="price_min_positive"),
        CheckConstraint("price_min <= price_max", name="price_range_ordered"),
        CheckConstraint("ends_at > starts_at", name="term_ordered"),
        CheckConstraint("min_move_seconds >= 0", name="min_move_non_negative"),
        CheckConstraint("proposer_id <> partner_id", name="two_distinct_parties"),
        # Every contract list first expires live contracts past their term (migration 0007).
        Index("ix_contracts_status_ends_at", "status", "ends_at"),
        # One live contract (proposed, countered or active) per unordered pair, held by the
        # database as well as by the service's check, which two concurrent proposals can both
        # pass. The pair is (lower id, higher id), computed with CASE, which both backends
        # index; written as PostgreSQL prints it back (line breaks and all), so that ``alembic
        # check`` finds the model and the database equal.
        Index(
            "uq_contracts_live_pair",
            text(_ordered_party("proposer_id", "partner_id")),
            text(_ordered_party("partner_id", "proposer_id")),
            unique=True,
            postgresql_where=text(LIVE_SQL),
            sqlite_where=text(LIVE_SQL),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    proposer_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    partner_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    price_min: Mapped[float] = mapped_column(Float)
    price_max: Mapped[float] = mapped_column(Float)
    starts_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ends_at: Mapped[datetime] = mapped_column(UTCDateTime)
    min_move_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    recovery: Mapped[Recovery | None] = mapped_column(
        Enum(Recovery, native_enum=False, length=16), nullable=True
    )
    max_delay_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    replica_hosting: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[ContractStatus] = mapped_column(
        Enum(ContractStatus, native_enum=False, length=16), default=ContractStatus.proposed
    )
    # Who wrote the terms now on the table; only the other party may accept or reject them.
    terms_author_id: Mapped[int | None] = mapped_column(
        ForeignKey("participants.id"), nullable=True
    )
    # Optimistic lock: clients send the version they saw, and SQLAlchemy refuses an UPDATE whose
    # row changed underneath, so concurrent accepts/counters cannot both win.
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    settled_amount: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    __mapper_args__ = {"version_id_col": version}

    def parties(self) -> tuple[int, int]:
        return (self.proposer_id, self.partner_id)


class ContractEvent(Base):
    """One step of a contract's negotiation history: every proposal, counter and decision."""

    __tablename__ = "contract_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    contract_id: Mapped[int] = mapped_column(
        ForeignKey("contracts.id", ondelete="CASCADE"), index=True
    )
    version: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(32))
    # Null when an admin or a contract file acted; ``actor`` then says which.
    author_id: Mapped[int | None] = mapped_column(ForeignKey("participants.id"), nullable=True)
    actor: Mapped[str] = mapped_column(String(128))
    terms: Mapped[dict[str, Any]] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class LedgerEntry(Base):
    """Money moving under a contract. Every entry has one payer and one payee, so what all
    payers pay equals what all payees receive by construction."""

    __tablename__ = "ledger_entries"
    __table_args__ = (
        CheckConstraint("amount >= 0", name="amount_non_negative"),
        CheckConstraint("payer_id <> payee_id", name="distinct_parties"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    contract_id: Mapped[int] = mapped_column(
        ForeignKey("contracts.id", ondelete="CASCADE"), index=True
    )
    payer_id: Mapped[int] = mapped_column(ForeignKey("participants.id"))
    payee_id: Mapped[int] = mapped_column(ForeignKey("participants.id"))
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id"), nullable=True)
    kind: Mapped[str] = mapped_column(String(16), default="accrual")
    load: Mapped[float] = mapped_column(Float, default=0.0)
    price: Mapped[float] = mapped_column(Float, default=0.0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    amount: Mapped[float] = mapped_column(Float)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
