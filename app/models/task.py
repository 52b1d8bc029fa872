from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, CheckConstraint, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class Task(Base):
    """A query fragment: owned by one participant, hosted by exactly one at any instant."""

    __tablename__ = "tasks"
    __table_args__ = (CheckConstraint("load >= 0", name="load_non_negative"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    load: Mapped[float] = mapped_column(Float, default=0.0)
    # Which contract the current host runs it under (null while at home) and at what price.
    contract_id: Mapped[int | None] = mapped_column(ForeignKey("contracts.id"), nullable=True)
    price: Mapped[float | None] = mapped_column(Float, nullable=True)
    host_since: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # An admin may pin a task so the market leaves it where it is.
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    # Fencing token: raised on every committed move, so an old host's late writes are refused.
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __mapper_args__ = {"version_id_col": version}
