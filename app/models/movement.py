from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Enum, Float, ForeignKey, Index, Integer, false, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class MovementReason(enum.StrEnum):
    load = "load"
    move_back = "move_back"
    failover = "failover"
    replica_switch = "replica_switch"
    reconciliation = "reconciliation"


# The market's reasons: a sale under the giver's contract. Every other reason relocates a task
# outside the market, to its owner or one of the owner's partners.
MARKET_REASONS = frozenset({MovementReason.load, MovementReason.move_back})


class MovementStatus(enum.StrEnum):
    prepared = "prepared"
    committed = "committed"
    aborted = "aborted"


class Movement(Base):
    """A two-phase record of one relocation: prepared, then committed or aborted."""

    __tablename__ = "movements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    # Indexed for a participant's movement list (from or to it, newest first; migration 0007).
    from_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    to_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    contract_id: Mapped[int | None] = mapped_column(ForeignKey("contracts.id"), nullable=True)
    offer_id: Mapped[int | None] = mapped_column(ForeignKey("offers.id"), nullable=True)
    reason: Mapped[MovementReason] = mapped_column(
        Enum(MovementReason, native_enum=False, length=16)
    )
    status: Mapped[MovementStatus] = mapped_column(
        Enum(MovementStatus, native_enum=False, length=16), default=MovementStatus.prepared
    )
    price: Mapped[float | None] = mapped_column(Float, nullable=True)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    # The copy that moves is the replica hosted by ``from_id``, not the task's primary (one
    # participant hosts at most one copy of a task, so task and source name the replica).
    replica: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    prepared_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class OfferStatus(enum.StrEnum):
    open = "open"
    accepted = "accepted"
    partially_accepted = "partially_accepted"
    rejected = "rejected"
    withdrawn = "withdrawn"
    expired = "expired"


class Offer(Base):
    """A BPM offer: tasks a participant will pay a partner to take, at a price per unit load."""

    __tablename__ = "offers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    contract_id: Mapped[int] = mapped_column(ForeignKey("contracts.id"), index=True)
    from_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    to_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    task_ids: Mapped[list[int]] = mapped_column(JSON)
    accepted_task_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    price: Mapped[float] = mapped_column(Float)
    status: Mapped[OfferStatus] = mapped_column(
        Enum(OfferStatus, native_enum=False, length=24), default=OfferStatus.open
    )
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    __mapper_args__ = {"version_id_col": version}

    # One open offer per participant at a time (the service checks it too; concurrent
    # offers can both pass the check, not this index).
    __table_args__ = (
        Index(
            "uq_offers_one_open",
            "from_id",
            unique=True,
            postgresql_where=text("status = 'open'"),
            sqlite_where=text("status = 'open'"),
        ),
    )
