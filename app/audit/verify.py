"""Recompute the audit chains from the stored entries and name the first entry that breaks one.

The log is several chains side by side (``app/audit/sealing.py``); each is walked in id order
from the genesis hash, and each must end where its head row says.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.chain import GENESIS, ChainFields, canonical_json, entry_hash
from app.models import AuditEntry, AuditHead, AuditSubject

BATCH = 1000


@dataclass(frozen=True)
class Broken:
    entry_id: int | None
    problem: str


@dataclass(frozen=True)
class Verdict:
    entries: int
    # One hash for the whole log: SHA-256 over every non-empty chain's end (``ends``).
    head: str
    broken: Broken | None
    # Chain -> (id, hash) of its last entry, for the chains that have entries.
    ends: dict[int, tuple[int, str]]

    @property
    def intact(self) -> bool:
        return self.broken is None


def log_head(ends: dict[int, tuple[int, str]]) -> str:
    """What ``fedload audit verify`` prints: keep it (or the chains' ends) elsewhere to find a
    later rewrite of the whole log."""
    if not ends:
        return GENESIS
    document = [[chain, *ends[chain]] for chain in sorted(ends)]
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()


def verify(session: Session) -> Verdict:
    """Walk the log in id order, recomputing each hash over the previous one of its chain."""
    ends: dict[int, tuple[int, str]] = {}
    count = 0

    def verdict(broken: Broken | None) -> Verdict:
        return Verdict(count, log_head(ends), broken, dict(ends))

    for entry, subjects in _entries(session):
        count += 1
        expected_prev = ends.get(entry.chain, (0, GENESIS))[1]
        if entry.prev_hash != expected_prev:
            return verdict(
                Broken(
                    entry.id,
                    "its previous hash is not the hash of the entry before it "
                    f"in chain {entry.chain} "
                    "(an entry before it was removed, inserted or reordered)",
                )
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
            return verdict(
                Broken(
                    entry.id,
                    f"its content changed: stored hash {entry.hash[:12]}..., "
                    f"recomputed {recomputed[:12]}...",
                )
            )
        ends[entry.chain] = (entry.id, entry.hash)
    heads = {head.id: (head.last_id, head.last_hash) for head in session.scalars(select(AuditHead))}
    for chain in sorted(set(heads) | set(ends)):
        end_id, end_hash = ends.get(chain, (0, GENESIS))
        if chain not in heads:
            return verdict(
                Broken(None, f"chain {chain} has entries (up to #{end_id}) but no head row")
            )
        head_id, head_hash = heads[chain]
        if (head_id, head_hash) == (end_id, end_hash):
            continue
        if head_id > end_id:
            why = "entries were removed from the end"
        elif head_id == end_id:
            why = "the last entry was rewritten, its hash recomputed"
        else:
            why = "entries were added without extending the chain's head"
        where = (
            f"the log ends at entry #{end_id} with hash {end_hash[:12]}... in chain {chain}"
            if end_id
            else f"chain {chain} has no entry"
        )
        return verdict(
            Broken(
                None,
                f"{where}, the chain's head records entry #{head_id} with {head_hash[:12]}... "
                f"({why})",
            )
        )
    return verdict(None)


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
