"""Database faults (issue 15): ``fedload serve`` fails at start in one line when the database
does not answer; a database lost after start, or a statement stuck past its timeout, is a JSON
503 with Retry-After, and ``/readyz`` says why while ``/healthz`` stays 200."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.db.session import dispose_engines
from app.server import free_port
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY
from tests.support.databases import _truncate_all
from tests.support.live_server import serve
from tests.support.tcp import TcpProxy, closed_port, silent_server

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def start_serve(database_url: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "FEDLOAD_DB_CONNECT_TIMEOUT_SECONDS": "2",
        "FEDLOAD_ADMIN_KEY": ADMIN_KEY,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(free_port())],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_serve_fails_at_start_in_one_line_when_the_database_does_not_answer() -> None:
    # Both cases at once: most of each run is the interpreter's imports.
    with silent_server() as silent:
        runs = {
            "closed port": start_serve(f"postgresql://postgres@127.0.0.1:{closed_port()}/fedload"),
            "accepts and never answers": start_serve(
                f"postgresql://postgres@127.0.0.1:{silent}/fedload"
            ),
        }
        for case, process in runs.items():
            # The bound is liveness only (imports take seconds on a loaded machine): before
            # issue 15 a silent database made this command hang for good.
            try:
                stdout, stderr = process.communicate(timeout=90)
            finally:
                process.kill()
            lines = [line for line in stderr.splitlines() if line.strip()]
            assert process.returncode == 2, (case, stderr)
            assert len(lines) == 1, (case, stderr)
            assert "does not answer" in lines[0] and "Traceback" not in stderr, case
            assert "fedload on http" not in stdout, case  # it never started serving


@pytest.fixture
def proxied(postgres_database: str) -> Iterator[tuple[str, TcpProxy]]:
    """The live service on the test database, reached through a proxy the test can cut."""
    _truncate_all(postgres_database)
    url = make_url(postgres_database)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    settings = Settings(
        database_url=through,
        admin_key=ADMIN_KEY,
        environment="test",
        db_connect_timeout_seconds=2,
    )
    try:
        with serve(settings) as base:
            yield base, proxy
    finally:
        proxy.cut()
        dispose_engines(through)


@pytest.mark.postgres
def test_a_database_lost_after_start_is_a_json_503_and_readyz_says_so(
    proxied: tuple[str, TcpProxy],
) -> None:
    base, proxy = proxied
    with httpx.Client(base_url=base, timeout=30) as client:
        created = client.post("/v1/participants", json={"name": "A", "capacity": 10}, headers=ADMIN)
        assert created.status_code == 201, created.text
        key = {"Authorization": f"Bearer {created.json()['api_key']}"}
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/contracts", headers=key).status_code == 200

        proxy.cut()

        for method, path, body in [
            ("GET", "/v1/contracts", None),
            ("GET", "/v1/participants/me", None),
            ("POST", "/v1/tasks", {"name": "A.t", "load": 1.0}),
        ]:
            response = client.request(method, path, json=body, headers=key)
            assert response.status_code == 503, (path, response.text)
            assert response.headers["content-type"] == "application/json"
            assert response.headers["retry-after"] == "1"
            assert "database" in response.json()["detail"]
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["detail"].startswith("database: OperationalError")
        assert client.get("/healthz").status_code == 200  # liveness: the process is fine


@pytest.mark.postgres
def test_a_statement_stuck_past_its_timeout_is_a_503_not_a_hang(postgres_database: str) -> None:
    _truncate_all(postgres_database)
    settings = Settings(
        database_url=postgres_database,
        admin_key=ADMIN_KEY,
        environment="test",
        db_statement_timeout_seconds=1,
    )
    with serve(settings) as base, httpx.Client(base_url=base, timeout=30) as client:
        keys = {}
        for name in ("A", "B"):
            r = client.post("/v1/participants", json={"name": name, "capacity": 10}, headers=ADMIN)
            keys[name] = {"Authorization": f"Bearer {r.json()['api_key']}"}
        cid = client.post(
            "/v1/contracts",
            json={"partner": "B", "price_min": 1, "price_max": 2},
            headers=keys["A"],
        ).json()["id"]
        locker = sa.create_engine(postgres_database)
        try:
            with locker.begin() as conn:
                # Another transaction holds the contract's row past the statement timeout.
                conn.execute(
                    sa.text("SELECT id FROM contracts WHERE id = :id FOR UPDATE"), {"id": cid}
                )
                stuck = client.post(
                    f"/v1/contracts/{cid}/accept", json={"version": 1}, headers=keys["B"]
                )
            assert stuck.status_code == 503, stuck.text
            assert stuck.headers["retry-after"] == "1"
            # Nothing was written: the accept goes through once the row is free.
            done = client.post(
                f"/v1/contracts/{cid}/accept", json={"version": 1}, headers=keys["B"]
            )
            assert done.status_code == 200 and done.json()["status"] == "active", done.text
        finally:
            locker.dispose()
