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


DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def nats_url() -> str:
    return os.environ.get("FEDLOAD_TEST_NATS_URL", DEFAULT_NATS_URL)


def nats_problem(url: str | None = None) -> str | None:
    """None when a NATS server with JetStream answers at ``url``; otherwise what is wrong."""
    import asyncio

    import nats

    from tests.support.event_loop import run_coroutine

    where = url or nats_url()

    async def quiet(error: Exception) -> None:
        return None  # the answer below says what failed; nats-py would print a traceback

    async def probe() -> None:
        client = await nats.connect(where, connect_timeout=3, allow_reconnect=False, error_cb=quiet)
        try:
            await client.jetstream().account_info()
        finally:
            await client.close()

    try:
        run_coroutine(asyncio.wait_for(probe(), 10))
    except Exception as exc:  # any failure is the same answer: not usable
        return (
            f"no NATS server with JetStream at {where} ({exc!r}); start one with: "
            "nats-server -a 127.0.0.1 -p 4222 -js"
        )
    return None
