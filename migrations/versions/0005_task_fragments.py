"""tasks carry their fragment: kind, parameters and input tasks

A task names what runs (a kind from app.tasks.catalogue), its parameters and the tasks whose
output streams it reads, so the registry, not a demo script, says which tasks are real
fragments and how they are wired. Existing tasks become declared loads (no fragment).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fragment", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("params", sa.JSON(), server_default="{}", nullable=False))
        batch_op.add_column(sa.Column("inputs", sa.JSON(), server_default="[]", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("inputs")
        batch_op.drop_column("params")
        batch_op.drop_column("fragment")
