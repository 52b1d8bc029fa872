"""The layering rules, pinned: each fails the moment a module imports across a boundary.

- Only ``app/cli.py`` in ``app/`` imports ``spark_jobs`` (the service runs without Spark).
- The pure engine (``app/market``, ``app/availability``) imports no web framework, ORM, HTTP
  client or Spark, and nothing of the service around it.
- The participant node (``app/participant``) talks to the registry over REST only: no ORM, no
  web framework, no Spark; its Spark adapter lives in ``spark_jobs/runtime``.
- The description of what a task runs (``app/work``) is pure: no service, ORM, web or Spark,
  so the registry and the agents share it.
- The runtime, sources and sinks (``spark_jobs/runtime``, ``sources``, ``sinks``) never open the
  registry's database: they reach it through the REST ports. A fragment
  (``spark_jobs/fragments``) reaches nothing of fedload but ``app.work``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WEB = ("fastapi", "starlette", "uvicorn")
ORM = ("sqlalchemy", "alembic", "app.db", "app.models")
SPARK = ("pyspark", "spark_jobs")
SERVICE = (
    "app.admin",
    "app.auth",
    "app.contracts",
    "app.movements",
    "app.offers",
    "app.participants",
    "app.permits",
    "app.tasks",
    "app.main",
    "app.server",
)

# (files, forbidden import prefixes, exempt files)
RULES: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("app/**/*.py", ("spark_jobs", "pyspark"), ("app/cli.py",)),
    ("app/market/**/*.py", (*WEB, *ORM, *SPARK, *SERVICE, "httpx", "app.participant"), ()),
    ("app/availability/**/*.py", (*WEB, *ORM, *SPARK, *SERVICE, "httpx", "app.participant"), ()),
    ("app/participant/**/*.py", (*WEB, *ORM, *SPARK, *SERVICE), ()),
    ("app/work/**/*.py", (*WEB, *ORM, *SPARK, *SERVICE, "httpx", "app.participant"), ()),
    ("spark_jobs/runtime/**/*.py", (*WEB, *ORM, *SERVICE), ()),
    ("spark_jobs/sources/**/*.py", (*WEB, *ORM, *SERVICE), ()),
    ("spark_jobs/sinks/**/*.py", (*WEB, *ORM, *SERVICE), ()),
    # A fragment is a Spark function of its inputs: of fedload it knows only what a task runs.
    ("spark_jobs/fragments/**/*.py", (*WEB, *ORM, *SERVICE, "httpx", "app.participant"), ()),
]


def imported_modules(source: str) -> Iterator[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def violations(source: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        {
            module
            for module in imported_modules(source)
            if any(module == f or module.startswith(f + ".") for f in forbidden)
        }
    )


@pytest.mark.parametrize(("pattern", "forbidden", "exempt"), RULES, ids=[r[0] for r in RULES])
def test_layering(pattern: str, forbidden: tuple[str, ...], exempt: tuple[str, ...]) -> None:
    files = [p for p in sorted(ROOT.glob(pattern)) if str(p.relative_to(ROOT)) not in exempt]
    assert files, f"no files match {pattern}: the rule would pin nothing"
    broken = {
        str(path.relative_to(ROOT)): found
        for path in files
        if (found := violations(path.read_text(), forbidden))
    }
    assert not broken, f"imports across a layer boundary: {broken}"


def test_the_checker_sees_imports_in_functions_and_from_imports() -> None:
    source = (
        "import os\n"
        "from app.market import bpm\n"
        "def later():\n"
        "    from spark_jobs.runtime import host\n"
        "    import sqlalchemy.orm\n"
    )
    assert violations(source, ("spark_jobs", "sqlalchemy")) == [
        "spark_jobs.runtime",
        "sqlalchemy.orm",
    ]
    assert violations(source, ("app.market",)) == ["app.market"]
    assert violations(source, ("app.marketing",)) == []
