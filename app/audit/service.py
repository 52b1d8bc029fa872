"""The audit log: one entry for every state change, written in the same transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import AuditEntry


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    entity_type: str,
    entity_id: int | None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    entry = AuditEntry(
        actor=actor,
        action=action,
        entity_type=entity_type,
        entity_id=entity_id,
        detail=detail or {},
    )
    session.add(entry)
    return entry


def recent(
    session: Session, *, limit: int = 100, entity_type: str | None = None
) -> list[AuditEntry]:
    query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    if entity_type is not None:
        query = query.where(AuditEntry.entity_type == entity_type)
    return list(session.scalars(query))


def for_entity(
    session: Session, entity_type: str, entity_id: int, *, limit: int = 100
) -> list[AuditEntry]:
    """The newest audit entries about one entity."""
    return list(
        session.scalars(
            select(AuditEntry)
            .where(AuditEntry.entity_type == entity_type, AuditEntry.entity_id == entity_id)
            .order_by(AuditEntry.id.desc())
            .limit(limit)
        )
    )
