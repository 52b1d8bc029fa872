"""replicas: replica records with their DPC state

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 11:13:44.426393
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("contract_id", sa.Integer(), nullable=True),
        sa.Column(
            "technique",
            sa.Enum(
                "active_standby",
                "passive_standby",
                "upstream_backup",
                name="replicatechnique",
                native_enum=False,
                length=24,
            ),
            nullable=False,
        ),
        sa.Column("load", sa.Float(), nullable=False),
        sa.Column("price", sa.Float(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_at", sa.DateTime(), nullable=False),
        sa.Column("accrued_at", sa.DateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("load >= 0", name=op.f("ck_replicas_load_non_negative")),
        sa.ForeignKeyConstraint(
            ["contract_id"], ["contracts.id"], name=op.f("fk_replicas_contract_id_contracts")
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_replicas_participant_id_participants"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_replicas_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replicas")),
        sa.UniqueConstraint(
            "task_id", "participant_id", name=op.f("uq_replicas_task_id_participant_id")
        ),
    )
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_replicas_participant_id"), ["participant_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_replicas_task_id"), ["task_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_replicas_task_id"))
        batch_op.drop_index(batch_op.f("ix_replicas_participant_id"))

    op.drop_table("replicas")
