"""one live contract per pair and one open offer per participant, held by the database

The services check both rules, but two concurrent requests can both pass a check (issue 15:
20 simultaneous proposals left 4 live contracts between one pair, 20 offers 8 open offers).
Partial unique indexes make the second insert fail; the API answers it with the check's 409.
The contract pair is unordered: the index is on (lower id, higher id), computed with CASE.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 03:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIVE = sa.text("status IN ('proposed', 'countered', 'active')")
_OPEN = sa.text("status = 'open'")


def upgrade() -> None:
    op.create_index(
        "uq_contracts_live_pair",
        "contracts",
        [
            sa.text("(CASE WHEN proposer_id < partner_id THEN proposer_id ELSE partner_id END)"),
            sa.text("(CASE WHEN proposer_id < partner_id THEN partner_id ELSE proposer_id END)"),
        ],
        unique=True,
        postgresql_where=_LIVE,
        sqlite_where=_LIVE,
    )
    op.create_index(
        "uq_offers_one_open",
        "offers",
        ["from_id"],
        unique=True,
        postgresql_where=_OPEN,
        sqlite_where=_OPEN,
    )


def downgrade() -> None:
    op.drop_index("uq_offers_one_open", table_name="offers")
    op.drop_index("uq_contracts_live_pair", table_name="contracts")
