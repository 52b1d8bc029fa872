"""Alembic environment: the URL comes from the caller, else from the fedload settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import pool

import app.models  # noqa: F401  (registers every table on Base.metadata)
from app.db.base import Base, UTCDateTime
from app.db.session import get_engine, normalise_url
from app.settings import get_settings

config = context.config
target_metadata = Base.metadata


def _database_url() -> str:
    url = config.attributes.get("database_url")
    return normalise_url(url or get_settings().database_url)


def _render_item(type_: str, obj: object, autogen_context) -> str | bool:  # type: ignore[no-untyped-def]
    # Migrations must not import app code, which changes over time: UTCDateTime is a plain
    # DateTime in the database.
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime()"
    return False


def run_migrations_offline() -> None:
    context.configure(
        url=_database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
        render_as_batch=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = get_engine(_database_url())
        with engine.connect() as connection:
            _run(connection)
    else:
        _run(connection)


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER constraints in place; batch mode rebuilds the table instead.
        render_as_batch=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


_ = pool  # keep the import for offline users who configure NullPool
if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
