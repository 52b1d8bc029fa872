"""Recompute the audit chain from the stored entries and name the first one that breaks it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.chain import GENESIS, ChainFields, entry_hash
from app.models import AuditEntry, AuditHead, AuditSubject

BATCH = 1000


@dataclass(frozen=True)
class Broken:
    entry_id: int | None
    problem: str


@dataclass(frozen=True)
class Verdict:
    entries: int
    head: str
    broken: Broken | None

    @property
    def intact(self) -> bool:
        return self.broken is None


def verify(session: Session) -> Verdict:
    """Walk the log in id order, recomputing each hash over the previous one."""
    expected_prev = GENESIS
    count = 0
    last_id = 0
    for entry, subjects in _entries(session):
        count += 1
        last_id = entry.id
        if entry.prev_hash != expected_prev:
            return Verdict(
                count,
                expected_prev,
                Broken(
                    entry.id,
                    "its previous hash is not the hash of the entry before it "
                    "(an entry before it was removed, inserted or reordered)",
                ),
            )
        fields = ChainFields(
            id=entry.id,
            at=entry.at,
            actor=entry.actor,
            action=entry.action,
            entity_type=entry.entity_type,
            entity_id=entry.entity_id,
            detail=entry.detail,
            subjects=subjects,
        )
        recomputed = entry_hash(fields, entry.prev_hash)
        if recomputed != entry.hash:
            return Verdict(
                count,
                expected_prev,
                Broken(
                    entry.id,
                    f"its content changed: stored hash {entry.hash[:12]}..., "
                    f"recomputed {recomputed[:12]}...",
                ),
            )
        expected_prev = entry.hash
    head = session.get(AuditHead, 1)
    if head is not None and (head.last_id, head.last_hash) != (last_id, expected_prev):
        if head.last_id > last_id:
            why = "entries were removed from the end"
        elif head.last_id == last_id:
            why = "the last entry was rewritten, its hash recomputed"
        else:
            why = "entries were added without extending the chain's head"
        return Verdict(
            count,
            expected_prev,
            Broken(
                None,
                f"the log ends at entry #{last_id} with hash {expected_prev[:12]}..., the "
                f"chain's head records entry #{head.last_id} with {head.last_hash[:12]}... "
                f"({why})",
            ),
        )
    return Verdict(count, expected_prev, None)


def _entries(session: Session) -> Iterator[tuple[AuditEntry, list[int]]]:
    after = 0
    while True:
        batch = list(
            session.scalars(
                select(AuditEntry).where(AuditEntry.id > after).order_by(AuditEntry.id).limit(BATCH)
            )
        )
        if not batch:
            return
        subjects: dict[int, list[int]] = defaultdict(list)
        for audit_id, participant_id in session.execute(
            select(AuditSubject.audit_id, AuditSubject.participant_id).where(
                AuditSubject.audit_id.between(batch[0].id, batch[-1].id)
            )
        ):
            subjects[audit_id].append(participant_id)
        for entry in batch:
            yield entry, subjects[entry.id]
        after = batch[-1].id
        session.expunge_all()  # a long log need not stay in memory
