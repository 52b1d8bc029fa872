"""The market engine imports no web framework, ORM, Spark, nor any driver of it (DESIGN.md:
"the live agents, the service and the what-if job all run the same decisions")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MARKET = Path(__file__).resolve().parents[3] / "app" / "market"
FORBIDDEN = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "pyspark",
    "app.db",
    "app.models",
    "app.offers",
    "app.movements",
    "app.participant",
    "app.admin",
    "spark_jobs",
)


@pytest.mark.parametrize("path", sorted(MARKET.glob("*.py")), ids=lambda p: p.name)
def test_market_modules_import_nothing_from_the_drivers(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    bad = sorted(m for m in imported for f in FORBIDDEN if m == f or m.startswith(f + "."))
    assert not bad, f"{path.name} imports {bad}"
