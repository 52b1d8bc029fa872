from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class Task(Base):
    """A query fragment: owned by one participant, hosted by exactly one at any instant."""

    __tablename__ = "tasks"
    __table_args__ = (
        CheckConstraint("load >= 0", name="load_non_negative"),
        # The task list's order and keyset (name, then id; migration 0007).
        Index("ix_tasks_name_id", "name", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    load: Mapped[float] = mapped_column(Float, default=0.0)
    # What runs: a kind from app.tasks.catalogue with its parameters, reading the output streams
    # of ``inputs`` ([{"task": name}], tasks of the same owner). No fragment: a declared load
    # that the market moves and nothing runs.
    fragment: Mapped[str | None] = mapped_column(String(64), nullable=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    inputs: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list, server_default="[]")
    # Or the owner's own work (app.work.spec.Work.to_json: a source, SQL or a Python function,
    # a watermark, a sink); empty for a catalogue fragment and for a declared load.
    work: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    # Runs nothing: a declared load the market moves (neither a fragment nor work).
    synthetic: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The columns of its output stream as Spark DDL, what its readers' SQL is checked against:
    # inferred at registration, replaced by Spark's analysis when the owner's agent reports it
    # (null: not known yet). ``analysis_error``: the agent's last analysis failed, and why.
    output_schema: Mapped[str | None] = mapped_column(Text, nullable=True)
    analysis_error: Mapped[str | None] = mapped_column(Text, nullable=True)
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
