from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, SmallInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class AuditEntry(Base):
    """Every state change, who made it and what it touched. Append-only, hash-chained
    (``app/audit/chain.py``); the database refuses UPDATE and DELETE (migration 0008).

    The log is several chains side by side (``chain``, the id of its ``AuditHead``), so that
    concurrent writers need not queue on one head row; ids are one sequence across them all."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    # "admin", "admin:alice", "participant:A", "file:contracts/borealis-demo.yaml", "system"
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(64), index=True)
    entity_type: Mapped[str] = mapped_column(String(32))
    entity_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    # Which chain the entry extends: its prev_hash is the hash of that chain's entry before it.
    chain: Mapped[int] = mapped_column(SmallInteger, default=1, server_default="1")


class AuditSubject(Base):
    """A participant an audit entry is about: the entries a participant may read."""

    __tablename__ = "audit_subjects"
    __table_args__ = (Index("ix_audit_subjects_participant_entry", "participant_id", "audit_id"),)

    audit_id: Mapped[int] = mapped_column(ForeignKey("audit_log.id"), primary_key=True)
    # No foreign key to participants: the log outlives what it describes, and inserting here
    # must never wait on a participant's row lock while the chain's head is held.
    participant_id: Mapped[int] = mapped_column(Integer, primary_key=True)


class AuditHead(Base):
    """One row per chain: its last entry. A writer locks one free head (SKIP LOCKED on
    PostgreSQL; the write lock on SQLite, where one chain suffices) and extends that chain, and
    ``fedload audit verify`` checks each chain still ends where its head says (entries cut
    from the end are found too)."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_id: Mapped[int] = mapped_column(Integer, default=0)
    last_hash: Mapped[str] = mapped_column(String(64))
