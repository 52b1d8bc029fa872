"""Where the real components of the test suite live, and whether they answer."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def postgres_url() -> str:
    return os.environ.get("FEDLOAD_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def postgres_problem(url: str) -> str | None:
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
        engine.dispose()
    except Exception as exc:  # any failure to connect is the same answer: not usable
        return (
            f"cannot connect to {url} ({type(exc).__name__}: {str(exc).splitlines()[0]}); start it "
            "with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
        )
    return None


def require(component: str, problem: str | None) -> None:
    """Stop a test whose real component is missing: a failure under CI=true (never a silent
    skip there), a skip with the reason elsewhere."""
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI=true: {component} is required: {problem}", pytrace=False)
    pytest.skip(f"{component}: {problem}")


def require_java() -> None:
    from tests.prerequisites import java_problem

    require("Java (Spark needs it)", java_problem())
