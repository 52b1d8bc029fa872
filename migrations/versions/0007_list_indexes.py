"""indexes for the paginated list queries (issue 15, throughput)

A participant's movement list filters on from_id or to_id (no index before: a scan of every
movement); every contract list first looks for live contracts past their term (status,
ends_at); the task list is ordered and paged by (name, id).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 03:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("movements", schema=None) as batch_op:
        batch_op.create_index("ix_movements_from_id", ["from_id"], unique=False)
        batch_op.create_index("ix_movements_to_id", ["to_id"], unique=False)
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.create_index("ix_contracts_status_ends_at", ["status", "ends_at"], unique=False)
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_name_id", ["name", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_name_id")
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.drop_index("ix_contracts_status_ends_at")
    with op.batch_alter_table("movements", schema=None) as batch_op:
        batch_op.drop_index("ix_movements_to_id")
        batch_op.drop_index("ix_movements_from_id")
