"""tasks carry their owner's own work; participants advertise the Python fragments they run

A task may run its owner's own work instead of a catalogue fragment: a source with a declared
schema, Spark SQL or a Python function over its inputs, with a sink (``work``). A task that runs
nothing is labelled ``synthetic`` (a declared load): existing tasks without a fragment become
synthetic. ``output_schema`` is the Spark DDL of the task's output stream, ``analysis_error``
what the owner's agent found wrong when it analysed the work with Spark. ``participants.
fragments`` lists the Python distributions a participant's agent may run, from its heartbeat.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 21:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("work", sa.JSON(), server_default="{}", nullable=False))
        batch_op.add_column(
            sa.Column("synthetic", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("output_schema", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("analysis_error", sa.Text(), nullable=True))
    op.execute(
        sa.text("UPDATE tasks SET synthetic = :yes WHERE fragment IS NULL").bindparams(
            sa.bindparam("yes", True, type_=sa.Boolean())
        )
    )
    with op.batch_alter_table("participants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fragments", sa.JSON(), nullable=True))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35+ and PostgreSQL alike), not by batch mode: rebuilding
    # participants or tasks would drop tables that other rows still reference.
    op.drop_column("participants", "fragments")
    for column in ("analysis_error", "output_schema", "synthetic", "work"):
        op.drop_column("tasks", column)
