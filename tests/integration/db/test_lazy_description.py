"""The API's psycopg cursors build ``description`` only when it is read (app/db/cursor.py): read,
it is psycopg's own, for the result it was taken from, and SQLAlchemy's results are unchanged."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.db.cursor import LazyDescriptionCursor
from app.db.session import get_engine


def _columns(description: object) -> list[tuple[object, ...]]:
    assert description is not None
    return [tuple(column) for column in description]  # type: ignore[attr-defined]


def test_the_description_read_is_psycopgs_own(postgres_database: str) -> None:
    url = make_url(postgres_database).set(drivername="postgresql")
    dsn = url.render_as_string(hide_password=False)
    query = "SELECT 1 AS n, 'x'::varchar(7) AS name, now() AS at, 2.5::numeric(4, 2) AS price"
    with (
        psycopg.connect(dsn) as plain,
        psycopg.connect(dsn, cursor_factory=LazyDescriptionCursor) as lazy,
    ):
        expected = plain.execute(query).description
        cursor = lazy.execute(query)
        assert isinstance(cursor, LazyDescriptionCursor)
        described = cursor.description
        assert described is not None and len(described) == 4
        cursor.execute("SELECT 'other' AS something_else")  # the cursor moves on
        assert _columns(described) == _columns(expected)
        assert [c.name for c in described] == ["n", "name", "at", "price"]
        assert [c.type_display for c in described] == [c.type_display for c in expected or []]
        # No rows at all: no description, as psycopg says.
        lazy.execute("CREATE TEMPORARY TABLE t (i int)")
        assert lazy.cursor().description is None
        assert lazy.execute("INSERT INTO t VALUES (1)").description is None
        assert plain.execute("SELECT ;").description == []
        nothing = lazy.execute("SELECT ;").description
        assert nothing is not None and list(nothing) == []


def test_the_engine_uses_them_and_results_are_unchanged(postgres_database: str) -> None:
    engine = get_engine(postgres_database)
    with engine.connect() as connection:
        raw = connection.connection.dbapi_connection
        assert raw is not None and raw.cursor_factory is LazyDescriptionCursor  # type: ignore[attr-defined]
        rows = connection.execute(sa.text("SELECT 1 AS a, 'b' AS b UNION ALL SELECT 2, 'c'"))
        assert list(rows.keys()) == ["a", "b"]
        assert [tuple(r) for r in rows] == [(1, "b"), (2, "c")]
        # Twice the same compiled statement: the second reads no column from the description.
        statement = sa.select(sa.literal(3).label("x"), sa.literal("y").label("y"))
        for _ in range(2):
            assert [r._asdict() for r in connection.execute(statement)] == [{"x": 3, "y": "y"}]


@pytest.fixture(autouse=True)
def _needs_postgres(postgres_database: str) -> None:
    """Every test here runs on PostgreSQL (psycopg), skipped with a reason without it."""
