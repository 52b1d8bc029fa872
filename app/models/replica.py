from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Enum,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class ReplicaTechnique(enum.StrEnum):
    """How the replica takes over when the primary host fails (issue 5, item 3)."""

    active_standby = "active_standby"
    passive_standby = "passive_standby"
    upstream_backup = "upstream_backup"


class Replica(Base):
    """A copy of a task on another participant: priced load like any other, one per participant.

    ``state`` is the DPC node state the hosting agent last reported (STABLE, UP_FAILURE,
    STABILIZATION), or FAILED once the host's heartbeats stopped.
    """

    __tablename__ = "replicas"
    __table_args__ = (
        # Never two replicas of one task on one participant: one crash would take both.
        UniqueConstraint("task_id", "participant_id"),
        CheckConstraint("load >= 0", name="load_non_negative"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    contract_id: Mapped[int | None] = mapped_column(ForeignKey("contracts.id"), nullable=True)
    technique: Mapped[ReplicaTechnique] = mapped_column(
        Enum(ReplicaTechnique, native_enum=False, length=24)
    )
    load: Mapped[float] = mapped_column(Float, default=0.0)
    price: Mapped[float | None] = mapped_column(Float, nullable=True)
    state: Mapped[str] = mapped_column(String(16), default="STABLE")
    state_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The paid hops once the market has moved the replica ({payer, payee, contract_id, price}
    # each, as a primary's journey: the owner keeps paying the placement host, which pays the
    # next). Null while it sits where it was placed: the owner pays its host at ``price``.
    hops: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # Payments for the replica's load are charged up to this instant.
    accrued_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Fencing token of this copy, as ``tasks.lease_epoch`` is the primary's: raised on every
    # committed move of the replica, so a host that lost it (and its late reports) is refused.
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __mapper_args__ = {"version_id_col": version}
