"""replica moves: movements.replica and replicas.hops

The market moves replicas as it moves primaries (issue 5, item 1): a movement says which copy it
relocates, and a moved replica keeps the paid hops of its journey.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 16:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("movements", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("replica", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hops", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("hops")
    with op.batch_alter_table("movements", schema=None) as batch_op:
        batch_op.drop_column("replica")
