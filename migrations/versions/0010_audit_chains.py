"""audit log: several chains side by side, ids from one sequence

Every audited commit used to lock the single head row of the chain, so concurrent writers
queued on it (the API's write p99 with two workers, bench/api). The log becomes ``CHAINS``
chains: ``audit_log.chain`` names the one an entry extends (the head row of the same id), and
a writer takes whichever head is free. The entries written so far stay where they are, in
chain 1 (head 1), with their hashes unchanged; the new chains start at the genesis hash.

Ids are no longer the head's count plus one but come from one sequence across the chains (on
PostgreSQL the column's own, moved past the entries written so far; SQLite has one writer at a
time and numbers after the largest id).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 13:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here (migrations never import the app); app/audit/sealing.py uses the head rows it
# finds, and creates this many when the table is empty.
CHAINS = 16
GENESIS = "0" * 64


def upgrade() -> None:
    bind = op.get_bind()
    # Not batch mode: SQLite would rebuild audit_log, and its append-only triggers with it.
    op.add_column(
        "audit_log", sa.Column("chain", sa.SmallInteger(), server_default="1", nullable=False)
    )
    present = set(bind.execute(sa.text("SELECT id FROM audit_head")).scalars())
    heads = [
        {"id": chain, "last_id": 0, "hash": GENESIS}
        for chain in range(2, CHAINS + 1)
        if chain not in present
    ]
    if 1 not in present:  # as app/audit/sealing.py does: chain 1 goes on from the log's end
        last = bind.execute(
            sa.text("SELECT id, hash FROM audit_log ORDER BY id DESC LIMIT 1")
        ).first()
        heads.append(
            {"id": 1, "last_id": last.id if last else 0, "hash": last.hash if last else GENESIS}
        )
    bind.execute(
        sa.text("INSERT INTO audit_head (id, last_id, last_hash) VALUES (:id, :last_id, :hash)"),
        heads,
    )
    if bind.dialect.name == "postgresql":
        bind.execute(
            sa.text(
                "SELECT setval(pg_get_serial_sequence('audit_log', 'id'), "
                "COALESCE(MAX(id), 0) + 1, false) FROM audit_log"
            )
        )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT 1 FROM audit_log WHERE chain <> 1 LIMIT 1")).first():
        raise RuntimeError(
            "audit entries were written to chains other than 1; merging them into one chain "
            "would rewrite their hashes, so this revision cannot be undone"
        )
    postgres = bind.dialect.name == "postgresql"
    # The head rows are append-only too (migration 0008): the trigger stands aside for this.
    if postgres:
        op.execute("ALTER TABLE audit_head DISABLE TRIGGER audit_head_append_only")
    else:
        trigger = bind.execute(
            sa.text("SELECT sql FROM sqlite_master WHERE type='trigger' AND name=:n"),
            {"n": "audit_head_no_delete"},
        ).scalar_one()
        op.execute("DROP TRIGGER audit_head_no_delete")
    bind.execute(sa.text("DELETE FROM audit_head WHERE id <> 1"))
    if postgres:
        op.execute("ALTER TABLE audit_head ENABLE TRIGGER audit_head_append_only")
    else:
        op.execute(trigger)
    op.drop_column("audit_log", "chain")
