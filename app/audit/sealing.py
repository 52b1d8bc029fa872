"""Chaining the audit entries of a transaction, as the last step before it commits.

``audit.record`` only queues an entry on the session. Just before the commit, the queued
entries get their place in one of the log's chains: the transaction locks a chain's head row,
which makes it the only transaction extending that chain until it commits, takes ids for its
entries from the log's sequence, hashes each over the previous hash and inserts them.

There are several chains (migration 0010) so that concurrent writers do not queue on one head:
a writer locks the first head no other transaction holds (``FOR UPDATE SKIP LOCKED``) and waits
only when every chain is busy. Each chain is as strong as the single one was (every entry
holds its predecessor's hash, every head its chain's end, ``fedload audit verify`` walks them
all); which chain an entry is in says nothing about it. On SQLite the database's write lock
admits one writer at a time anyway: the subquery finds the first head, always free.

Ids come from one sequence, taken while the head is held, so a chain's ids rise in chain order
(entries of different chains may commit out of id order: two writers at once).

Taking the head at the very end, after everything else is flushed, keeps it short and free of
deadlocks: once it is held the transaction only inserts into the audit tables, which hold no
foreign key to a row another transaction could have locked.

A row another module writes as part of a step, which nothing in the transaction reads again
(a contract's history event), may ride along: ``insert_at_commit`` queues it, and on
PostgreSQL it is one more data-modifying CTE of the entries' statement instead of a round trip
of its own (``bench/api/README.md``, session 25). A reader of such a table inside a
transaction writes what is queued first (``insert_queued``).

Listeners registered with ``on_committed`` hear of the entries once their transaction is
committed (the metrics count moves and offers this way; a rolled-back entry is never counted).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, bindparam, event, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction

from app.audit.chain import GENESIS, ChainFields, entry_hash
from app.audit.subjects import KEPT, KNOWN_PARTIES, concerned, keep_alive
from app.models import AuditEntry, AuditHead, AuditSubject

PENDING = "fedload.audit.pending"
# session.info: rows to insert with the audit entries (``insert_at_commit``), in queue order.
ROWS = "fedload.audit.rows"
SEALED = "fedload.audit.sealed"
# Chains created when the head table is empty (as migration 0010 does).
CHAINS = 16


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


def insert_at_commit(session: Session, table: Table, row: dict[str, Any]) -> None:
    """Insert ``row`` into ``table`` just before the transaction commits, with its audit
    entries. For rows nothing in the transaction reads again (``insert_queued`` otherwise):
    every column the table fills from a Python default must be given (``at``, say), since
    the row may be inserted by a CTE."""
    # Begun here if need be: a row must belong to the transaction that writes it, or a
    # rollback before any statement would leave it queued for the next one.
    transaction = session.get_nested_transaction() or session.get_transaction() or session.begin()
    rows: list[tuple[Table, dict[str, Any], SessionTransaction | None]] = session.info.setdefault(
        ROWS, []
    )
    rows.append((table, row, transaction))


def insert_queued(session: Session) -> None:
    """Insert the rows ``insert_at_commit`` queued so far, now, in order: for a reader of
    their tables inside the transaction."""
    rows: list[tuple[Table, dict[str, Any], Any]] = session.info.pop(ROWS, [])
    for table, row, _ in rows:
        session.execute(_insert(table), row)


@functools.cache
def _insert(table: Table) -> Any:
    return insert(table)


def _seal(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint's release: the chain waits for the end
        return
    pending: list[tuple[AuditEntry, Any]] = session.info.pop(PENDING, [])
    if not pending:
        insert_queued(session)
        return
    session.flush()  # everything else first: the head is locked only for the inserts below
    rows: list[tuple[Table, dict[str, Any], Any]] = session.info.pop(ROWS, [])
    actors: dict[str, int | None] = {}
    concerning = [concerned(session, entry, actors) for entry, _ in pending]
    postgres = session.get_bind().dialect.name == "postgresql"
    chain, last_hash, ids = _lock_head(session, len(pending), postgres=postgres)
    entries: list[dict[str, Any]] = []
    subjects: list[dict[str, int]] = []
    sealed: list[CommittedEntry] = []
    for (entry, _), about, entry_id in zip(pending, concerning, ids, strict=True):
        digest = entry_hash(
            ChainFields(
                id=entry_id,
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
        entry.id, entry.chain, entry.prev_hash, entry.hash = entry_id, chain, last_hash, digest
        entries.append(
            {
                "id": entry_id,
                "at": entry.at,
                "actor": entry.actor,
                "action": entry.action,
                "entity_type": entry.entity_type,
                "entity_id": entry.entity_id,
                "detail": entry.detail,
                "prev_hash": last_hash,
                "hash": digest,
                "chain": chain,
            }
        )
        subjects += [
            {"audit_id": entry_id, "participant_id": p} for p in sorted(about.participant_ids)
        ]
        sealed.append(CommittedEntry(entry.action, entry.entity_type, about.movement_reason))
        last_hash = digest
    # Core statements built once (below), not the ORM's unit of work: the rows are final, and
    # building and flushing them as objects was most of what an audited commit cost.
    end = {"chain": chain, "end_id": ids[-1], "end_hash": last_hash}
    # One queued row at most: the CTEs of one statement run in no set order, and two rows of
    # one table must get their serial ids in the order they were queued.
    if (
        postgres
        and len(entries) <= MAX_ONE_STATEMENT
        and len(subjects) <= 4 * MAX_ONE_STATEMENT
        and len(rows) <= 1
    ):
        shape = tuple((table, tuple(row)) for table, row, _ in rows)
        values = _flat(entries, subjects, end)
        for k, (_, row, _) in enumerate(rows):
            values.update({f"row_{k}_{column}": value for column, value in row.items()})
        session.execute(_write_at_once(len(entries), len(subjects), shape), values)
    else:
        for table, row, _ in rows:
            session.execute(_insert(table), row)
        session.execute(_INSERT_ENTRIES, entries)
        if subjects:
            session.execute(_INSERT_SUBJECTS, subjects)
        session.execute(_EXTEND, end)
    session.info[SEALED] = sealed


# A transaction with at most this many entries (nearly all have one) writes them, their
# subjects and its chain's new end in one statement on PostgreSQL; larger ones in three.
MAX_ONE_STATEMENT = 4


@functools.lru_cache(maxsize=64)
def _write_at_once(
    entry_count: int, subject_count: int, rows: tuple[tuple[Table, tuple[str, ...]], ...] = ()
) -> Any:
    """One round trip instead of three: the entries and their subjects inserted by
    data-modifying CTEs of the head's update, one single-row insert each (a multi-row VALUES
    is a statement SQLAlchemy does not cache, compiled anew each time). PostgreSQL checks the
    subjects' foreign key at the end of the statement, when the entries are there. ``rows``:
    the queued rows' tables and columns (``insert_at_commit``), a CTE each too. Built once
    per shape."""
    statement = _EXTEND
    for k, (table, columns) in enumerate(rows):
        values: dict[str, Any] = {
            c: bindparam(f"row_{k}_{c}", type_=table.c[c].type) for c in columns
        }
        statement = statement.add_cte(insert(table).values(values).cte(f"queued_row_{k}"))
    for i in range(entry_count):
        row = {c: bindparam(f"{c}_{i}", type_=_log.c[c].type) for c in _LOG_COLUMNS}
        statement = statement.add_cte(insert(_log).values(row).cte(f"sealed_entry_{i}"))
    for j in range(subject_count):
        subject: dict[str, Any] = {
            "audit_id": bindparam(f"audit_id_{j}"),
            "participant_id": bindparam(f"subject_{j}"),
        }
        statement = statement.add_cte(insert(_subjects).values(subject).cte(f"sealed_subject_{j}"))
    return statement


def _flat(
    entries: list[dict[str, Any]], subjects: list[dict[str, int]], end: dict[str, Any]
) -> dict[str, Any]:
    values = dict(end)
    for i, entry in enumerate(entries):
        values.update({f"{column}_{i}": entry[column] for column in _LOG_COLUMNS})
    for j, subject in enumerate(subjects):
        values[f"audit_id_{j}"] = subject["audit_id"]
        values[f"subject_{j}"] = subject["participant_id"]
    return values


_log = cast(Table, AuditEntry.__table__)
_heads = cast(Table, AuditHead.__table__)
_subjects = cast(Table, AuditSubject.__table__)
_LOG_COLUMNS = (
    "id",
    "at",
    "actor",
    "action",
    "entity_type",
    "entity_id",
    "detail",
    "prev_hash",
    "hash",
    "chain",
)
_INSERT_ENTRIES = insert(_log)
_INSERT_SUBJECTS = insert(_subjects)
_EXTEND = (
    update(_heads)
    .where(_heads.c.id == bindparam("chain"))
    .values(last_id=bindparam("end_id"), last_hash=bindparam("end_hash"))
)
# The sequence behind audit_log.id on PostgreSQL (a serial column; migration 0010 moved it on).
_SEQUENCE_SQL = "pg_get_serial_sequence('audit_log', 'id')"
_NEXT_IDS = text(f"SELECT nextval({_SEQUENCE_SQL}) FROM generate_series(1, :n)")
_free = _heads.alias("free")
_FIRST_FREE = (
    select(_free.c.id).order_by(_free.c.id).limit(1).with_for_update(skip_locked=True)
).scalar_subquery()


def _touch(where: Any, *, postgres: bool) -> Any:
    """Lock a head row (an update of nothing) and read where its chain ends; on PostgreSQL
    take the first id in the same round trip (most transactions write one entry)."""
    returned: list[Any] = [_heads.c.id, _heads.c.last_hash]
    if postgres:
        returned.append(func.nextval(text(_SEQUENCE_SQL)))
    return update(_heads).where(where).values(last_id=_heads.c.last_id).returning(*returned)


_TOUCH = {
    (postgres, any_chain): _touch(
        _heads.c.id == (bindparam("chain") if any_chain else _FIRST_FREE), postgres=postgres
    )
    for postgres in (True, False)
    for any_chain in (True, False)
}


def _lock_head(session: Session, count: int, *, postgres: bool) -> tuple[int, str, list[int]]:
    """Lock a chain's head; return the chain, the hash it ends with and ``count`` new ids."""
    head = session.execute(_TOUCH[postgres, False]).first()
    if head is None and session.scalar(select(_heads.c.id).limit(1)) is None:
        _create_heads(session)
        head = session.execute(_TOUCH[postgres, False]).first()
    if head is None:  # every chain busy: wait for one, any one
        chains = list(session.scalars(select(_heads.c.id)))
        head = session.execute(_TOUCH[postgres, True], {"chain": random.choice(chains)}).one()
    row: tuple[Any, ...] = tuple(head)
    chain, last_hash = int(row[0]), str(row[1])
    if postgres:
        ids = [int(row[2])]
        if count > 1:
            ids += session.scalars(_NEXT_IDS, {"n": count - 1})
    else:  # one writer at a time: number after the log's largest id
        largest: int = session.scalar(select(func.max(_log.c.id))) or 0
        ids = list(range(largest + 1, largest + 1 + count))
    return chain, last_hash, ids


def _create_heads(session: Session) -> None:
    """No head row (an emptied table): one per chain, each where its chain ends in the log.
    Two writers may both get here; the second one's insert fails quietly."""
    ends = {
        row.chain: (row.id, row.hash)
        for row in session.execute(
            select(AuditEntry.chain, AuditEntry.id, AuditEntry.hash).where(
                AuditEntry.id.in_(select(func.max(AuditEntry.id)).group_by(AuditEntry.chain))
            )
        )
    }
    try:
        with session.begin_nested():
            session.add_all(
                AuditHead(
                    id=chain,
                    last_id=ends.get(chain, (0, GENESIS))[0],
                    last_hash=ends.get(chain, (0, GENESIS))[1],
                )
                for chain in range(1, max(CHAINS, *ends, 1) + 1)
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
    """A rollback drops the entries and rows queued inside the transaction it rolled back."""
    session.info.pop(SEALED, None)
    pending = session.info.get(PENDING)
    if pending:
        session.info[PENDING] = [(e, txn) for e, txn in pending if not _within(txn, previous)]
    rows = session.info.get(ROWS)
    if rows:
        session.info[ROWS] = [(t, r, txn) for t, r, txn in rows if not _within(txn, previous)]


def _within(txn: SessionTransaction | None, outer: SessionTransaction) -> bool:
    while txn is not None:
        if txn is outer:
            return True
        txn = txn.parent
    return False


def _forget(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the whole transaction is over: nothing may carry over
        session.info.pop(PENDING, None)
        session.info.pop(ROWS, None)
        session.info.pop(SEALED, None)
        session.info.pop(KEPT, None)
        session.info.pop(KNOWN_PARTIES, None)


event.listen(Session, "before_commit", _seal)
event.listen(Session, "after_commit", _notify)
event.listen(Session, "after_soft_rollback", _drop_rolled_back)
event.listen(Session, "after_transaction_end", _forget)
