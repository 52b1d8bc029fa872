"""Run Alembic migrations from code (``fedload db upgrade``, ``fedload serve``, tests)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from app.db.session import normalise_url
from app.resources import alembic_ini, migrations_dir


def alembic_config(database_url: str) -> Config:
    # From the checkout or, installed from a wheel, from the package (app/resources.py).
    config = Config(str(alembic_ini()))
    config.set_main_option("script_location", str(migrations_dir()))
    # Passed as an attribute rather than through the ini so '%' in passwords needs no escaping.
    config.attributes["database_url"] = normalise_url(database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)
