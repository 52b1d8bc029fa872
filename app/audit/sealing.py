"""Chaining the audit entries of a transaction, as the last step before it commits.

``audit.record`` only queues an entry on the session. Just before the commit, every queued entry
gets its place in the chain: the head row is updated first, which makes this the only
transaction extending the chain until it commits (a row lock on PostgreSQL, the database's write
lock on SQLite); then the entries are numbered after the head, hashed over the previous hash and
inserted. Taking that lock at the very end, after everything else is flushed, keeps it short and
free of deadlocks: once it is held the transaction only inserts into the audit tables, which
hold no foreign key to a row another transaction could have locked.

Listeners registered with ``on_committed`` hear of the entries once their transaction is
committed (the metrics count moves and offers this way; a rolled-back entry is never counted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction

from app.audit.chain import GENESIS, ChainFields, entry_hash
from app.audit.subjects import KEPT, concerned, keep_alive
from app.models import AuditEntry, AuditHead, AuditSubject

PENDING = "fedload.audit.pending"
SEALED = "fedload.audit.sealed"
HEAD_ID = 1


@dataclass(frozen=True)
class CommittedEntry:
    action: str
    entity_type: str
    movement_reason: str | None


Listener = Callable[[list[CommittedEntry]], None]
_listeners: list[Listener] = []


def on_committed(listener: Listener) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def queue(session: Session, entry: AuditEntry) -> None:
    pending: list[tuple[AuditEntry, SessionTransaction | None]] = session.info.setdefault(
        PENDING, []
    )
    pending.append((entry, session.get_nested_transaction() or session.get_transaction()))
    keep_alive(session, entry)


def _seal(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint's release: the chain waits for the end
        return
    pending: list[tuple[AuditEntry, Any]] = session.info.pop(PENDING, [])
    if not pending:
        return
    session.flush()  # everything else first: the head is locked only for the inserts below
    actors: dict[str, int | None] = {}
    concerning = [concerned(session, entry, actors) for entry, _ in pending]
    last_id, last_hash = _lock_head(session)
    sealed: list[CommittedEntry] = []
    for (entry, _), about in zip(pending, concerning, strict=True):
        last_id += 1
        entry.id = last_id
        entry.prev_hash = last_hash
        entry.hash = entry_hash(
            ChainFields(
                id=entry.id,
                at=entry.at,
                actor=entry.actor,
                action=entry.action,
                entity_type=entry.entity_type,
                entity_id=entry.entity_id,
                detail=entry.detail,
                subjects=about.participant_ids,
            ),
            last_hash,
        )
        last_hash = entry.hash
        session.add(entry)
        session.add_all(
            AuditSubject(audit_id=entry.id, participant_id=p) for p in sorted(about.participant_ids)
        )
        sealed.append(CommittedEntry(entry.action, entry.entity_type, about.movement_reason))
    session.flush()
    session.execute(
        update(AuditHead)
        .where(AuditHead.id == HEAD_ID)
        .values(last_id=last_id, last_hash=last_hash)
    )
    session.info[SEALED] = sealed


def _lock_head(session: Session) -> tuple[int, str]:
    """Take the chain's lock and read where it ends (one statement: UPDATE ... RETURNING)."""
    touch = (
        update(AuditHead)
        .where(AuditHead.id == HEAD_ID)
        .values(last_id=AuditHead.last_id)
        .returning(AuditHead.last_id, AuditHead.last_hash)
    )
    head = session.execute(touch).first()
    if head is None:
        _create_head(session)
        head = session.execute(touch).one()
    return int(head.last_id), str(head.last_hash)


def _create_head(session: Session) -> None:
    """No head row (an emptied table): start it at the log's last entry. Two writers may both
    get here; the second one's insert fails quietly and it waits on the first one's row."""
    last = session.execute(
        select(AuditEntry.id, AuditEntry.hash).order_by(AuditEntry.id.desc()).limit(1)
    ).first()
    try:
        with session.begin_nested():
            session.add(
                AuditHead(
                    id=HEAD_ID,
                    last_id=last.id if last else 0,
                    last_hash=last.hash if last else GENESIS,
                )
            )
    except IntegrityError:
        pass


def _notify(session: Session) -> None:
    if session.in_nested_transaction():
        return
    sealed: list[CommittedEntry] = session.info.pop(SEALED, [])
    if sealed:
        for listener in _listeners:
            listener(sealed)


def _drop_rolled_back(session: Session, previous: SessionTransaction) -> None:
    """A rollback drops the entries queued inside the transaction it rolled back."""
    session.info.pop(SEALED, None)
    pending = session.info.get(PENDING)
    if not pending:
        return
    session.info[PENDING] = [(entry, txn) for entry, txn in pending if not _within(txn, previous)]


def _within(txn: SessionTransaction | None, outer: SessionTransaction) -> bool:
    while txn is not None:
        if txn is outer:
            return True
        txn = txn.parent
    return False


def _forget(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the whole transaction is over: nothing may carry over
        session.info.pop(PENDING, None)
        session.info.pop(SEALED, None)
        session.info.pop(KEPT, None)


event.listen(Session, "before_commit", _seal)
event.listen(Session, "after_commit", _notify)
event.listen(Session, "after_soft_rollback", _drop_rolled_back)
event.listen(Session, "after_transaction_end", _forget)
