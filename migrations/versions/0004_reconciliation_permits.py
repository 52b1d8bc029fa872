"""reconciliation permits and replica epochs

The registry arbitrates reconciliation between replicas that cannot reach each other (issue 5,
DPC): one permit per fragment, a lease with a fencing counter. And a replica gets a fencing
token of its own, raised on each of its moves, as the primary's ``tasks.lease_epoch``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 18:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reconciliation_permits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fragment", sa.String(length=128), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=True),
        sa.Column("participant_id", sa.Integer(), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("fence >= 0", name=op.f("ck_reconciliation_permits_fence_non_negative")),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_reconciliation_permits_participant_id_participants"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reconciliation_permits")),
        sa.UniqueConstraint("fragment", name=op.f("uq_reconciliation_permits_fragment")),
    )
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lease_epoch", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("lease_epoch")
    op.drop_table("reconciliation_permits")
