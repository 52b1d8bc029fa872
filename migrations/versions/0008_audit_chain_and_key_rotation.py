"""audit log hash chain, its subjects and head; append-only triggers; API key rotation

The audit log becomes append-only and hash-chained: each entry stores the previous entry's hash
and its own (SHA-256 over a canonical JSON of its fields, format 1 of app/audit/chain.py),
``audit_subjects`` lists the participants each entry is about (what a participant may read at
GET /v1/audit), and ``audit_head`` the chain's last entry. Entries written before this
revision get their subjects and hashes here, in id order. Triggers refuse UPDATE and DELETE on
the audit tables, on PostgreSQL and on SQLite alike. A participant keeps its previous API key
for a grace period after a rotation.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 03:00:00.000000
"""

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GENESIS = "0" * 64
APPEND_ONLY = {"audit_log": "UPDATE OR DELETE", "audit_subjects": "UPDATE OR DELETE"}

# Who each entry written so far is about: the rule of app/audit/subjects.py, in SQL.
SUBJECTS = """
SELECT a.id, p.id FROM audit_log a JOIN participants p ON a.actor = 'participant:' || p.name
UNION SELECT a.id, a.entity_id FROM audit_log a
    WHERE a.entity_type = 'participant' AND a.entity_id IS NOT NULL
UNION SELECT a.id, c.proposer_id FROM audit_log a JOIN contracts c
    ON a.entity_type = 'contract' AND c.id = a.entity_id
UNION SELECT a.id, c.partner_id FROM audit_log a JOIN contracts c
    ON a.entity_type = 'contract' AND c.id = a.entity_id
UNION SELECT a.id, t.owner_id FROM audit_log a JOIN tasks t
    ON a.entity_type = 'task' AND t.id = a.entity_id
UNION SELECT a.id, t.host_id FROM audit_log a JOIN tasks t
    ON a.entity_type = 'task' AND t.id = a.entity_id
UNION SELECT a.id, o.from_id FROM audit_log a JOIN offers o
    ON a.entity_type = 'offer' AND o.id = a.entity_id
UNION SELECT a.id, o.to_id FROM audit_log a JOIN offers o
    ON a.entity_type = 'offer' AND o.id = a.entity_id
UNION SELECT a.id, m.from_id FROM audit_log a JOIN movements m
    ON a.entity_type = 'movement' AND m.id = a.entity_id
UNION SELECT a.id, m.to_id FROM audit_log a JOIN movements m
    ON a.entity_type = 'movement' AND m.id = a.entity_id
UNION SELECT a.id, t.owner_id FROM audit_log a JOIN movements m
    ON a.entity_type = 'movement' AND m.id = a.entity_id JOIN tasks t ON t.id = m.task_id
UNION SELECT a.id, r.participant_id FROM audit_log a JOIN reconciliation_permits r
    ON a.entity_type = 'permit' AND r.id = a.entity_id WHERE r.participant_id IS NOT NULL
"""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _hash(row: Any, subjects: list[int], prev_hash: str) -> str:
    # Format 1 of app/audit/chain.py, frozen here: migrations never import the app.
    at: datetime = row.at if isinstance(row.at, datetime) else datetime.fromisoformat(row.at)
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    detail = row.detail if not isinstance(row.detail, str) else json.loads(row.detail)
    document = {
        "v": 1,
        "id": row.id,
        "at": at.isoformat(timespec="microseconds"),
        "actor": row.actor,
        "action": row.action,
        "entity_type": row.entity_type,
        "entity_id": row.entity_id,
        "detail": json.loads(_canonical(detail or {})),
        "subjects": sorted(set(subjects)),
        "prev_hash": prev_hash,
    }
    return hashlib.sha256(_canonical(document).encode()).hexdigest()


def _chain_existing_entries(subjects: dict[int, list[int]]) -> tuple[int, str]:
    bind = op.get_bind()
    log = sa.table(
        "audit_log",
        sa.column("id", sa.Integer),
        sa.column("at", sa.DateTime),
        sa.column("actor", sa.String),
        sa.column("action", sa.String),
        sa.column("entity_type", sa.String),
        sa.column("entity_id", sa.Integer),
        sa.column("detail", sa.JSON),
        sa.column("prev_hash", sa.String),
        sa.column("hash", sa.String),
    )
    last_id, prev = 0, GENESIS
    for row in bind.execute(sa.select(log).order_by(log.c.id)).all():
        digest = _hash(row, subjects.get(row.id, []), prev)
        bind.execute(log.update().where(log.c.id == row.id).values(prev_hash=prev, hash=digest))
        last_id, prev = row.id, digest
    return last_id, prev


def _create_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION fedload_audit_append_only() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END;
            $$
            """
        )
        for table, events in {**APPEND_ONLY, "audit_head": "DELETE"}.items():
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE {events} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION fedload_audit_append_only()"
            )
        return
    for table, event in [
        ("audit_log", "UPDATE"),
        ("audit_log", "DELETE"),
        ("audit_subjects", "UPDATE"),
        ("audit_subjects", "DELETE"),
        ("audit_head", "DELETE"),
    ]:
        op.execute(
            f"CREATE TRIGGER {table}_no_{event.lower()} BEFORE {event} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {event} refused'); END"
        )


def _drop_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in (*APPEND_ONLY, "audit_head"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        op.execute("DROP FUNCTION IF EXISTS fedload_audit_append_only()")
        return
    for table, event in [
        ("audit_log", "update"),
        ("audit_log", "delete"),
        ("audit_subjects", "update"),
        ("audit_subjects", "delete"),
        ("audit_head", "delete"),
    ]:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_no_{event}")


def upgrade() -> None:
    bind = op.get_bind()
    subjects: dict[int, list[int]] = {}
    for audit_id, participant_id in bind.execute(sa.text(SUBJECTS)):
        subjects.setdefault(audit_id, []).append(participant_id)

    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prev_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("hash", sa.String(length=64), nullable=True))
    last_id, last_hash = _chain_existing_entries(subjects)
    # Before audit_subjects refers to it: SQLite rebuilds the table here.
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.alter_column("prev_hash", existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column("hash", existing_type=sa.String(length=64), nullable=False)
        batch_op.create_unique_constraint(batch_op.f("uq_audit_log_hash"), ["hash"])

    op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("last_id", sa.Integer(), nullable=False),
        sa.Column("last_hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_head")),
    )
    bind.execute(
        sa.text("INSERT INTO audit_head (id, last_id, last_hash) VALUES (1, :id, :hash)"),
        {"id": last_id, "hash": last_hash},
    )
    op.create_table(
        "audit_subjects",
        sa.Column("audit_id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["audit_id"], ["audit_log.id"], name=op.f("fk_audit_subjects_audit_id_audit_log")
        ),
        sa.PrimaryKeyConstraint("audit_id", "participant_id", name=op.f("pk_audit_subjects")),
    )
    with op.batch_alter_table("audit_subjects", schema=None) as batch_op:
        batch_op.create_index(
            "ix_audit_subjects_participant_entry", ["participant_id", "audit_id"], unique=False
        )
    pairs = [
        {"audit_id": a, "participant_id": p} for a, ps in subjects.items() for p in sorted(set(ps))
    ]
    if pairs:
        bind.execute(
            sa.text(
                "INSERT INTO audit_subjects (audit_id, participant_id) "
                "VALUES (:audit_id, :participant_id)"
            ),
            pairs,
        )

    with op.batch_alter_table("participants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("previous_key_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("previous_key_expires_at", sa.DateTime(), nullable=True))
        batch_op.create_unique_constraint(
            batch_op.f("uq_participants_previous_key_hash"), ["previous_key_hash"]
        )
    _create_triggers()


def downgrade() -> None:
    _drop_triggers()
    with op.batch_alter_table("participants", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_participants_previous_key_hash"), type_="unique")
        batch_op.drop_column("previous_key_expires_at")
        batch_op.drop_column("previous_key_hash")
    with op.batch_alter_table("audit_subjects", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_subjects_participant_entry")
    op.drop_table("audit_subjects")
    op.drop_table("audit_head")
    # audit_subjects is gone, so SQLite may rebuild audit_log now.
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_audit_log_hash"), type_="unique")
        batch_op.drop_column("hash")
        batch_op.drop_column("prev_hash")
