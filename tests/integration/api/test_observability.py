"""Operations: Prometheus metrics after real requests, request ids and the JSON request log."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.db.session import unit_of_work
from app.models import LedgerEntry
from app.observability.logs import JsonFormatter
from tests.integration.api.conftest import Api

# What these tests check does not depend on the database: once is enough.
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metrics(api: Api) -> Samples:
    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return scrape(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def grew(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_requests_are_counted_and_timed_by_route_template(abc: Api) -> None:
    before = metrics(abc)
    for name in ("X", "Y", "Z"):  # three paths, one route: one series
        assert abc.get("admin", f"/v1/participants/{name}").status_code == 404
    for _ in range(2):
        assert abc.get("A", "/v1/participants/me").status_code == 200
    assert abc.client.get("/no/such/route").status_code == 404
    after = metrics(abc)

    route = {"route": "/v1/participants/{name}", "method": "GET"}
    assert grew(before, after, "fedload_http_requests_total", **route, status="404") == 3
    assert grew(before, after, "fedload_http_request_duration_seconds_count", **route) == 3
    assert grew(before, after, "fedload_http_request_duration_seconds_sum", **route) > 0
    me = {"route": "/v1/participants/me", "method": "GET", "status": "200"}
    assert grew(before, after, "fedload_http_requests_total", **me) == 2
    lost = {"route": "unmatched", "method": "GET", "status": "404"}
    assert grew(before, after, "fedload_http_requests_total", **lost) == 1
    assert not any("/v1/participants/X" in str(key) for key in after)


def test_moves_offers_and_payments_are_counted_once_committed(abc: Api, db_url: str) -> None:
    before = metrics(abc)
    contract = abc.propose("A", "B", price_min=0.2, price_max=0.3)
    assert (
        abc.post("B", f"/v1/contracts/{contract['id']}/accept", {"version": 1}).status_code == 200
    )
    for task in ("A.q1", "A.q2"):
        assert abc.post("A", "/v1/tasks", {"name": task, "load": 5.0}).status_code == 201
    moved = []
    for task in ("A.q1", "A.q2"):
        offer = abc.post(
            "A", "/v1/offers", {"contract_id": contract["id"], "tasks": [task], "price": 0.25}
        ).json()
        accepted = abc.post("B", f"/v1/offers/{offer['id']}/accept", {"version": 1})
        assert accepted.status_code == 200, accepted.text
        moved.append(accepted.json()["movement_ids"][0])
    assert abc.post("B", f"/v1/movements/{moved[0]}/commit", {"epoch": 1}).status_code == 200
    assert abc.post("B", f"/v1/movements/{moved[1]}/abort").status_code == 200
    # A refused commit changes nothing and counts nothing.
    assert abc.post("B", f"/v1/movements/{moved[0]}/commit", {"epoch": 1}).status_code == 409
    time.sleep(0.05)  # some time hosted, so the heartbeat accrues a payment
    assert abc.post("A", "/v1/participants/me/heartbeat", {"load": 1.0}).status_code == 200
    after = metrics(abc)

    load = {"reason": "load"}
    assert grew(before, after, "fedload_movements_total", **load, outcome="prepared") == 2
    assert grew(before, after, "fedload_movements_total", **load, outcome="committed") == 1
    assert grew(before, after, "fedload_movements_total", **load, outcome="aborted") == 1
    assert grew(before, after, "fedload_offers_total", outcome="created") == 2
    assert grew(before, after, "fedload_offers_total", outcome="accepted") == 2
    with unit_of_work(db_url) as session:
        paid = session.scalar(sa.select(sa.func.sum(LedgerEntry.amount)))
    assert paid is not None and paid > 0
    assert grew(before, after, "fedload_payments_total", kind="accrual") == pytest.approx(paid)


def test_participants_by_liveness_are_read_at_scrape_time(abc: Api) -> None:
    assert abc.post("A", "/v1/participants/me/heartbeat", {}).status_code == 200
    suspended = abc.client.patch(
        "/v1/participants/C", json={"status": "suspended"}, headers=abc.headers("admin")
    )
    assert suspended.status_code == 200
    samples = metrics(abc)
    assert value(samples, "fedload_participants", liveness="online", status="active") == 1
    assert value(samples, "fedload_participants", liveness="unknown", status="active") == 1
    assert value(samples, "fedload_participants", liveness="unknown", status="suspended") == 1
    assert value(samples, "fedload_participants", liveness="failed", status="active") == 0
    assert value(samples, "fedload_registry_up") == 1


@SQLITE_ONLY
def test_request_id_is_kept_or_made_echoed_and_logged_with_the_error(
    abc: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fedload.access")
    given = abc.client.get(
        "/v1/participants/Q", headers={**abc.headers("A"), "X-Request-ID": "trace-42.a"}
    )
    assert given.headers["x-request-id"] == "trace-42.a"
    unsafe = abc.client.get("/v1/participants/me", headers={"X-Request-ID": 'a b"c'})
    made = unsafe.headers["x-request-id"]
    assert made != 'a b"c' and len(made) == 32 and int(made, 16) >= 0

    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records]
    error = next(line for line in lines if line["request_id"] == "trace-42.a")
    assert error["route"] == "/v1/participants/{name}" and error["method"] == "GET"
    assert (error["status"], error["principal"], error["level"]) == (403, "participant:A", "info")
    assert error["error"] == {"detail": "admin key required", "field": "Authorization"}
    assert isinstance(error["duration_ms"], float) and error["msg"].startswith("GET /v1/")
    anonymous = next(line for line in lines if line["request_id"] == made)
    assert (anonymous["status"], anonymous["principal"]) == (401, None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_fedload_serve_logs_json_lines_and_adds_up_metrics_across_processes(
    tmp_path: Path,
) -> None:
    """The real command, in multiprocess mode (what ``--workers`` needs): one JSON line per
    request on stderr, and /metrics read from the metric files every worker writes."""
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'registry.db'}",
        "FEDLOAD_ADMIN_KEY": "serve-admin-key",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }
    env.pop("FEDLOAD_LOG_FORMAT", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 90
            while True:
                try:
                    httpx.get(f"{url}/healthz", timeout=2)
                    break
                except httpx.TransportError:
                    assert server.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, "fedload serve did not start"
                    time.sleep(0.3)
            created = httpx.post(
                f"{url}/v1/participants",
                json={"name": "A", "capacity": 10},
                headers={"Authorization": "Bearer serve-admin-key", "X-Request-ID": "serve-1"},
            )
            assert created.status_code == 201 and created.headers["x-request-id"] == "serve-1"
            exposed = scrape(httpx.get(f"{url}/metrics").text)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert list(metrics_dir.glob("counter_*.db")), "no per-process metric files written"
    route = {"route": "/v1/participants", "method": "POST", "status": "201"}
    assert value(exposed, "fedload_http_requests_total", **route) == 1
    assert value(exposed, "fedload_participants", liveness="unknown", status="active") == 1
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    request = next(line for line in lines if line.get("request_id") == "serve-1")
    assert (request["logger"], request["status"], request["principal"]) == (
        "fedload.access",
        201,
        "admin",
    )
    assert any(line["logger"].startswith("uvicorn") for line in lines)  # the server's own, too


@SQLITE_ONLY
def test_a_server_error_is_logged_with_its_traceback_and_request_id(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    app = api.client.app
    app.add_api_route("/test-only/broken", broken)  # type: ignore[attr-defined]
    caplog.set_level(logging.INFO, logger="fedload.access")
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/test-only/broken", headers={"X-Request-ID": "bug-1"})
    assert response.status_code == 500
    (record,) = [r for r in caplog.records if r.name == "fedload.access"]
    line = json.loads(JsonFormatter().format(record))
    assert (line["level"], line["status"], line["request_id"]) == ("error", 500, "bug-1")
    assert line["route"] == "/test-only/broken"
    assert "RuntimeError: a bug" in line["exc"]
