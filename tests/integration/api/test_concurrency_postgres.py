"""Concurrent decisions on one contract against a real server and PostgreSQL: no lost update."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY
from tests.support.databases import _truncate_all
from tests.support.live_server import serve

pytestmark = pytest.mark.postgres


@pytest.fixture
def live_server(postgres_database: str) -> Iterator[str]:
    _truncate_all(postgres_database)
    settings = Settings(database_url=postgres_database, admin_key=ADMIN_KEY, environment="test")
    with serve(settings) as url:
        yield url


def test_twenty_concurrent_accepts_and_counters_end_in_one_outcome(live_server: str) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=live_server, timeout=30) as client:
        keys = {}
        for name in ("A", "B"):
            r = client.post("/v1/participants", json={"name": name, "capacity": 100}, headers=admin)
            keys[name] = {"Authorization": f"Bearer {r.json()['api_key']}"}
        cid = client.post(
            "/v1/contracts",
            json={"partner": "B", "price_min": 0.8, "price_max": 1.0},
            headers=keys["A"],
        ).json()["id"]
        # B counters once so that both parties have something to answer at version 2.
        client.post(
            f"/v1/contracts/{cid}/counter",
            json={"version": 1, "price_min": 0.9, "price_max": 1.0},
            headers=keys["B"],
        )

    def act(i: int) -> tuple[str, int]:
        # A may accept or counter B's terms; B (the author) may do neither, whatever it tries.
        who = "A" if i % 2 == 0 else "B"
        with httpx.Client(base_url=live_server, timeout=30) as c:
            if i % 4 in (0, 1):
                r = c.post(f"/v1/contracts/{cid}/accept", json={"version": 2}, headers=keys[who])
            else:
                r = c.post(
                    f"/v1/contracts/{cid}/counter",
                    json={"version": 2, "price_min": 0.85 + i / 1000, "price_max": 1.0},
                    headers=keys[who],
                )
            return (f"{who}:{'accept' if i % 4 in (0, 1) else 'counter'}", r.status_code)

    barrier_start = time.monotonic()
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(act, range(20)))
    assert time.monotonic() - barrier_start < 120

    codes = Counter(code for _, code in results)
    winners = [who for who, code in results if code == 200]
    assert len(winners) == 1, results
    assert winners[0].startswith("A:")
    assert codes[200] == 1 and codes[409] + codes[403] == 19, results
    assert all(code in (200, 403, 409) for _, code in results)

    with httpx.Client(base_url=live_server, timeout=30) as client:
        final = client.get(f"/v1/contracts/{cid}", headers=keys["A"]).json()
        history = client.get(f"/v1/contracts/{cid}/history", headers=keys["A"]).json()
    assert final["version"] == 3
    assert final["status"] == ("active" if winners[0] == "A:accept" else "countered")
    # Exactly one decision recorded after B's counter: no lost and no double update.
    assert [h["version"] for h in history] == [1, 2, 3]


def test_concurrent_accepts_of_one_offer_prepare_each_task_once(live_server: str) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=live_server, timeout=30) as client:
        keys = {}
        for name in ("A", "B"):
            r = client.post("/v1/participants", json={"name": name, "capacity": 100}, headers=admin)
            keys[name] = {"Authorization": f"Bearer {r.json()['api_key']}"}
        cid = client.post(
            "/v1/contracts",
            json={"partner": "B", "price_min": 0.2, "price_max": 0.3},
            headers=keys["A"],
        ).json()["id"]
        client.post(f"/v1/contracts/{cid}/accept", json={"version": 1}, headers=keys["B"])
        for task in ("A.q1", "A.q2"):
            client.post("/v1/tasks", json={"name": task, "load": 5}, headers=keys["A"])
        oid = client.post(
            "/v1/offers",
            json={"contract_id": cid, "tasks": ["A.q1", "A.q2"], "price": 0.25},
            headers=keys["A"],
        ).json()["id"]

    def accept(_: int) -> int:
        with httpx.Client(base_url=live_server, timeout=30) as c:
            return c.post(
                f"/v1/offers/{oid}/accept", json={"version": 1}, headers=keys["B"]
            ).status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        codes = Counter(pool.map(accept, range(12)))
    assert codes[200] == 1, codes
    assert codes[409] == 11, codes

    with httpx.Client(base_url=live_server, timeout=30) as client:
        movements = client.get("/v1/movements", headers=keys["B"]).json()
    assert sorted(m["task"] for m in movements) == ["A.q1", "A.q2"]
    assert {m["status"] for m in movements} == {"prepared"}
