"""Uniqueness rules the database enforces, translated back into the 409s the services give.

A service checks a rule first (a clear message naming the existing record); two concurrent
requests can both pass that check, and then the database's unique index stops the second at
its insert. ``conflict_for`` turns that IntegrityError into the same status and field as the
check, so a race reads like a lost check, never like a server error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from app.errors import Conflict

LIVE_CONTRACT_PER_PAIR = "uq_contracts_live_pair"
OPEN_OFFER_PER_PARTICIPANT = "uq_offers_one_open"


@dataclass(frozen=True)
class _Rule:
    table: str
    # The constraint's name on PostgreSQL, or a column SQLite names in its message; None:
    # any unique rule of the table whose name or columns mention ``field``.
    constraint: str | None
    sqlite_columns: tuple[str, ...]
    field: str
    detail: str


_RULES = (
    _Rule(
        "contracts",
        LIVE_CONTRACT_PER_PAIR,
        (),
        "partner",
        "you and this partner already have a live contract (proposed, countered or active); "
        "one per pair",
    ),
    _Rule(
        "offers",
        OPEN_OFFER_PER_PARTICIPANT,
        ("offers.from_id",),
        "contract_id",
        "you already have an offer outstanding; one at a time",
    ),
    _Rule("participants", None, ("participants.name",), "name", "this participant name is taken"),
    _Rule("tasks", None, ("tasks.name",), "name", "a task with this name already exists"),
)

_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (?:index '(?P<index>[^']+)'|(?P<cols>.+))")


def _violated(exc: IntegrityError) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(table, constraint, sqlite columns) of a unique violation, or Nones."""
    diag = getattr(exc.orig, "diag", None)
    if diag is not None:  # psycopg
        if getattr(exc.orig, "sqlstate", None) != "23505":
            return None, None, ()
        return diag.table_name, diag.constraint_name, ()
    match = _SQLITE_UNIQUE.search(str(exc.orig))
    if match is None:
        return None, None, ()
    if match["index"]:
        return None, match["index"], ()
    columns = tuple(c.strip() for c in match["cols"].split(","))
    return columns[0].split(".")[0], None, columns


def conflict_for(exc: IntegrityError) -> Conflict | None:
    """The 409 for a violated uniqueness rule of ours; None for any other integrity error."""
    table, constraint, columns = _violated(exc)
    for rule in _RULES:
        if rule.constraint is not None and constraint == rule.constraint:
            return Conflict(rule.detail, field=rule.field)
        if table != rule.table:
            continue
        if rule.constraint is None and constraint is not None and rule.field in constraint:
            return Conflict(rule.detail, field=rule.field)
        if any(column in columns for column in rule.sqlite_columns):
            return Conflict(rule.detail, field=rule.field)
    return None
