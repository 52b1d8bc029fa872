"""Where fedload's non-Python files are: the Alembic migrations and configuration, the
federation JSON Schema and the example federations.

In the repository they stay at the top level (``migrations/``, ``alembic.ini``, ``contracts/``,
fixed by the product's layout). A wheel cannot install top-level data beside its packages, so
the build (``setup.py``) copies them into ``app/_bundled/`` with the same relative layout, and
an installed fedload reads them from there. A checkout (including an editable install) has no
``app/_bundled/`` and reads the top-level files, so an edit to a migration is seen at once.
"""

from __future__ import annotations

from pathlib import Path

# The folder and file names copied into the wheel; setup.py imports nothing from app, so it
# keeps its own copy of this list and tests/integration/packaging pins that the two agree.
BUNDLED = ("alembic.ini", "migrations", "contracts")

_PACKAGE = Path(__file__).resolve().parent
_BUNDLE = _PACKAGE / "_bundled"
_CHECKOUT = _PACKAGE.parent


def data_root() -> Path:
    """The folder holding ``alembic.ini``, ``migrations/`` and ``contracts/``."""
    return _BUNDLE if _BUNDLE.is_dir() else _CHECKOUT


def data_path(*parts: str) -> Path:
    return data_root().joinpath(*parts)


def alembic_ini() -> Path:
    return data_path("alembic.ini")


def migrations_dir() -> Path:
    return data_path("migrations")


def contracts_dir() -> Path:
    return data_path("contracts")


def federation_schema_path() -> Path:
    return contracts_dir() / "federation.schema.json"
