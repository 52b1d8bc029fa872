"""failure detection: participants.failed_at and the participant_failures history

The registry's failure sweeper marks a participant failed when one of its heartbeat windows
closes unanswered (``participants.failed_at``, null while it is a member in good standing) and
keeps each failure, with the rejoin that ended it, in ``participant_failures`` for the admin's
availability view.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 06:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.add_column(sa.Column("failed_at", sa.DateTime(), nullable=True))
    op.create_table(
        "participant_failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("failed_at", sa.DateTime(), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("aborted_movements", sa.Integer(), nullable=False),
        sa.Column("rejoined_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_participant_failures_participant_id_participants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_participant_failures")),
    )
    op.create_index(
        op.f("ix_participant_failures_participant_id"),
        "participant_failures",
        ["participant_id"],
    )
    op.create_index(
        op.f("ix_participant_failures_failed_at"), "participant_failures", ["failed_at"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_participant_failures_failed_at"), table_name="participant_failures")
    op.drop_index(op.f("ix_participant_failures_participant_id"), table_name="participant_failures")
    op.drop_table("participant_failures")
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("failed_at")
