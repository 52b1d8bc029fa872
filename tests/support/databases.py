"""Database fixtures: every registry test runs on SQLite and on PostgreSQL, migrated by Alembic.

Isolation: SQLite tests each get a copy of a file migrated once per run; PostgreSQL tests share a
database created for this run (so parallel runs on one server never meet) and start from
truncated tables.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.db.base import Base
from app.db.migrate import upgrade
from app.db.session import dispose_engines, get_engine
from tests.support.components import postgres_problem, postgres_url, require

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    dispose_engines(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    server_url = postgres_url()
    require("PostgreSQL", postgres_problem(server_url))
    name = f"fedload_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    try:
        yield url
    finally:
        dispose_engines(url)
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def _truncate_all(url: str) -> None:
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with get_engine(url).begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A freshly migrated, empty registry on each backend in turn."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "registry.db"
        shutil.copy(template, path)
        url = f"sqlite:///{path}"
        yield url
        dispose_engines(url)
    else:
        url = request.getfixturevalue("postgres_database")
        _truncate_all(url)
        yield url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("db_url") == "postgres":
            item.add_marker(pytest.mark.postgres)
