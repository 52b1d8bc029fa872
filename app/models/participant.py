from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, CheckConstraint, Enum, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class ParticipantStatus(enum.StrEnum):
    active = "active"
    suspended = "suspended"


class Participant(Base):
    __tablename__ = "participants"
    __table_args__ = (CheckConstraint("capacity > 0", name="capacity_positive"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    capacity: Mapped[float] = mapped_column(Float)
    # What every other participant may see: free text, contact, region.
    profile: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Private to the participant and admins: the market never needs another's cost curve.
    cost_model: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # API keys are 256-bit random tokens, so a fast hash is enough; there is nothing to brute-force.
    api_key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # After a rotation the previous key keeps working until ``previous_key_expires_at`` (the
    # grace period lets agents pick up the new key without a gap); one previous key at most.
    previous_key_hash: Mapped[str | None] = mapped_column(String(64), unique=True, nullable=True)
    previous_key_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    status: Mapped[ParticipantStatus] = mapped_column(
        Enum(ParticipantStatus, native_enum=False, length=16), default=ParticipantStatus.active
    )
    # Liveness as seen by the service (online / suspect / failed / unknown), fed by heartbeats.
    liveness: Mapped[str] = mapped_column(String(16), default="unknown")
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # Set by the registry's failure sweeper when a heartbeat window closed unanswered (the
    # participant is fenced until it rejoins); null while it is a member in good standing.
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    endpoint: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # The Python distributions whose fragments its agent's operator allows, as its last
    # heartbeat advertised them (null: never said; it is offered no python fragment).
    fragments: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class ParticipantSample(Base):
    """Load and marginal cost reported by a participant's agent, for charts over time."""

    __tablename__ = "participant_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(
        ForeignKey("participants.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    load: Mapped[float] = mapped_column(Float)
    marginal_cost: Mapped[float | None] = mapped_column(Float, nullable=True)
    threshold: Mapped[float | None] = mapped_column(Float, nullable=True)
    # DPC node state of the participant's fragments: STABLE, UP_FAILURE, STABILIZATION.
    node_state: Mapped[str | None] = mapped_column(String(16), nullable=True)


class ParticipantFailure(Base):
    """One failure the registry declared, and when the participant rejoined after it: the
    history the admin's availability timeline draws (``participants.failed_at`` is the now)."""

    __tablename__ = "participant_failures"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(
        ForeignKey("participants.id", ondelete="CASCADE"), index=True
    )
    failed_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    # The last heartbeat the registry had recorded: the failure happened after it.
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # What the fence ended: prepared movements aborted at once.
    aborted_movements: Mapped[int] = mapped_column(Integer, default=0)
    rejoined_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
