"""The audit log: one entry for every state change, written in the same transaction.

Entries are append-only and hash-chained: ``record`` queues an entry on the session, and the
commit chains and inserts it (``app/audit/sealing.py``), so an entry exists exactly when the
change it describes was committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import sealing
from app.audit.chain import as_stored
from app.auth.principal import Principal
from app.db.base import utcnow
from app.models import AuditEntry, AuditSubject, Participant


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
        at=utcnow(),
        actor=actor,
        action=action,
        entity_type=entity_type,
        entity_id=entity_id,
        detail=as_stored(detail),
    )
    sealing.queue(session, entry)
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


@dataclass(frozen=True)
class AuditPage:
    entries: list[AuditEntry]
    # Participant names of each entry's subjects, by entry id.
    subjects: dict[int, list[str]]
    next_cursor: int | None


def page_for(
    session: Session, principal: Principal, *, limit: int, before: int | None
) -> AuditPage:
    """Newest first, ``limit`` entries older than the entry ``before`` (the previous page's
    cursor). The admin reads every entry; a participant the entries about itself."""
    newest_first = AuditEntry.id.desc()
    query = select(AuditEntry)
    if principal.participant_id is not None:
        # Through the (participant_id, audit_id) index: the page is read in index order.
        query = query.join(AuditSubject, AuditSubject.audit_id == AuditEntry.id).where(
            AuditSubject.participant_id == principal.participant_id
        )
        newest_first = AuditSubject.audit_id.desc()
    if before is not None:
        query = query.where(AuditEntry.id < before)
    query = query.order_by(newest_first).limit(limit + 1)
    rows = list(session.scalars(query))
    more = len(rows) > limit
    entries = rows[:limit]
    return AuditPage(
        entries=entries,
        subjects=_subject_names(session, [e.id for e in entries]),
        next_cursor=entries[-1].id if more and entries else None,
    )


def _subject_names(session: Session, entry_ids: list[int]) -> dict[int, list[str]]:
    if not entry_ids:
        return {}
    rows = session.execute(
        select(AuditSubject.audit_id, Participant.name)
        .join(Participant, Participant.id == AuditSubject.participant_id)
        .where(AuditSubject.audit_id.in_(entry_ids))
        .order_by(Participant.name)
    )
    names: dict[int, list[str]] = {i: [] for i in entry_ids}
    for entry_id, name in rows:
        names[entry_id].append(name)
    return names
