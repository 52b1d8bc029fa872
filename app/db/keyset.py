"""Keyset ("seek") conditions for paginated list queries: rows strictly after a sort key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, tuple_
from sqlalchemy.orm import InstrumentedAttribute


def after(
    query: Select[Any],
    columns: Sequence[InstrumentedAttribute[Any]],
    key: Sequence[Any] | None,
    *,
    descending: bool = False,
) -> Select[Any]:
    """``query`` restricted to rows whose ``columns`` come after ``key`` in the list's order.

    The caller orders by the same columns (all ascending, or all descending) and limits; a
    composite key compares as a row value, which PostgreSQL and SQLite (3.15+) both index.
    """
    if key is None:
        return query
    if len(key) != len(columns):
        raise ValueError(f"a cursor key of {len(key)} values for {len(columns)} columns")
    left: Any = columns[0] if len(columns) == 1 else tuple_(*columns)
    right: Any = key[0] if len(key) == 1 else tuple_(*key)
    return query.where(left < right if descending else left > right)
