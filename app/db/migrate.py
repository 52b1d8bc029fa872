"""Run Alembic migrations from code (``fedload db upgrade``, ``fedload serve``, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from app.db.session import normalise_url

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    # Passed as an attribute rather than through the ini so '%' in passwords needs no escaping.
    config.attributes["database_url"] = normalise_url(database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)
