from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class ReconciliationPermit(Base):
    """The arbiter's permit of one fragment (issue 5, DPC): which replica may reconcile now.

    One row per fragment (unique), kept after a release so the fence keeps counting: each grant
    to a new holder raises it. ``holder`` is null once released; a lease past ``expires_at`` is
    free for the next asker (the rule is ``app.availability.leases``).
    """

    __tablename__ = "reconciliation_permits"
    __table_args__ = (CheckConstraint("fence >= 0", name="fence_non_negative"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fragment: Mapped[str] = mapped_column(String(128), unique=True)
    holder: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # The participant whose agent asked for the holder (null for the admin key).
    participant_id: Mapped[int | None] = mapped_column(ForeignKey("participants.id"), nullable=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    fence: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
