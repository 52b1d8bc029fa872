"""A whole-registry snapshot, to prove that a refused request wrote nothing."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from app.db.base import Base
from app.db.session import get_engine


def registry_snapshot(db_url: str) -> dict[str, list[tuple[Any, ...]]]:
    with get_engine(db_url).connect() as conn:
        return {
            table.name: sorted(
                (tuple(str(v) for v in row) for row in conn.execute(sa.select(table))), key=str
            )
            for table in Base.metadata.sorted_tables
        }
