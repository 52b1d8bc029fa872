"""Uniqueness rules under real concurrency: a live server on PostgreSQL, 20 clients at once.

Each rule is checked by the service and held by the database (migration 0006 and the unique
names); a request that loses the race between the check and the insert gets the check's 409,
never a 500, and the rule holds afterwards.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY
from tests.support.databases import _truncate_all
from tests.support.live_server import serve

pytestmark = pytest.mark.postgres

CLIENTS = 20
OVERLOAD_RETRIES = 5
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def live_server(postgres_database: str) -> Iterator[str]:
    settings = Settings(database_url=postgres_database, admin_key=ADMIN_KEY, environment="test")
    with serve(settings) as url:
        yield url


@pytest.fixture
def server(live_server: str, postgres_database: str) -> str:
    _truncate_all(postgres_database)
    return live_server


def _at_once(url: str, send: Callable[[httpx.Client, int], httpx.Response]) -> list[Any]:
    """Run ``send`` from CLIENTS threads released together; (status, body) of each."""
    gate = threading.Barrier(CLIENTS)

    def one(i: int) -> tuple[int, Any]:
        with httpx.Client(base_url=url, timeout=60) as client:
            client.get("/healthz")  # connect before the gate, so the requests overlap
            gate.wait()
            response = send(client, i)
            # An overloaded service answers 503 with Retry-After before doing anything (CI
            # machines are shared); a client is told to come back, so it does, and the race
            # is still decided by the rule under test.
            for _ in range(OVERLOAD_RETRIES):
                if response.status_code != 503:
                    break
                time.sleep(float(response.headers.get("Retry-After", "1")))
                response = send(client, i)
            return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        return list(pool.map(one, range(CLIENTS)))


def _register(client: httpx.Client, *names: str) -> dict[str, dict[str, str]]:
    keys = {}
    for name in names:
        r = client.post("/v1/participants", json={"name": name, "capacity": 100}, headers=ADMIN)
        assert r.status_code == 201, r.text
        keys[name] = {"Authorization": f"Bearer {r.json()['api_key']}"}
    return keys


def _only_one_won(results: list[tuple[int, Any]], field: str) -> None:
    codes = Counter(code for code, _ in results)
    assert codes == {201: 1, 409: CLIENTS - 1}, results
    for code, body in results:
        if code == 409:
            assert body["field"] == field, body


def test_twenty_concurrent_proposals_leave_one_live_contract_per_pair(server: str) -> None:
    with httpx.Client(base_url=server, timeout=60) as client:
        keys = _register(client, "A", "B")

    def propose(client: httpx.Client, i: int) -> httpx.Response:
        # Both directions: the pair is unordered.
        me, partner = ("A", "B") if i % 2 == 0 else ("B", "A")
        terms = {"partner": partner, "price_min": 0.5, "price_max": 1.0 + i / 100}
        return client.post("/v1/contracts", json=terms, headers=keys[me])

    _only_one_won(_at_once(server, propose), "partner")
    with httpx.Client(base_url=server, timeout=60) as client:
        contracts = client.get("/v1/contracts", headers=ADMIN).json()
    assert [c["status"] for c in contracts] == ["proposed"]


def test_twenty_concurrent_offers_leave_one_open_offer(server: str) -> None:
    with httpx.Client(base_url=server, timeout=60) as client:
        keys = _register(client, "A", "B")
        cid = client.post(
            "/v1/contracts",
            json={"partner": "B", "price_min": 0.2, "price_max": 0.3},
            headers=keys["A"],
        ).json()["id"]
        assert client.post(
            f"/v1/contracts/{cid}/accept", json={"version": 1}, headers=keys["B"]
        ).is_success
        for i in range(CLIENTS):
            r = client.post("/v1/tasks", json={"name": f"A.q{i}", "load": 5}, headers=keys["A"])
            assert r.status_code == 201, r.text

    def offer(client: httpx.Client, i: int) -> httpx.Response:
        body = {"contract_id": cid, "tasks": [f"A.q{i}"], "price": 0.25}
        return client.post("/v1/offers", json=body, headers=keys["A"])

    _only_one_won(_at_once(server, offer), "contract_id")
    with httpx.Client(base_url=server, timeout=60) as client:
        offers = client.get("/v1/offers", headers=ADMIN).json()
    assert [o["status"] for o in offers] == ["open"]


def test_concurrent_creations_of_one_participant_name_give_409s(server: str) -> None:
    def create(client: httpx.Client, i: int) -> httpx.Response:
        return client.post(
            "/v1/participants", json={"name": "Same", "capacity": 10 + i}, headers=ADMIN
        )

    _only_one_won(_at_once(server, create), "name")
    with httpx.Client(base_url=server, timeout=60) as client:
        names = [p["name"] for p in client.get("/v1/participants", headers=ADMIN).json()]
    assert names == ["Same"]


def test_concurrent_creations_of_one_task_name_give_409s(server: str) -> None:
    with httpx.Client(base_url=server, timeout=60) as client:
        keys = _register(client, "A", "B")

    def declare(client: httpx.Client, i: int) -> httpx.Response:
        owner = "A" if i % 2 == 0 else "B"
        body = {"name": f"{owner}.shared", "load": i}
        return client.post("/v1/tasks", json=body, headers=keys[owner])

    results = _at_once(server, declare)
    codes = Counter(code for code, _ in results)
    # Names are per owner: each owner's "shared" is won once, and neither race touches the other.
    assert codes[201] == 2 and codes[409] == CLIENTS - 2, results
    assert all(body["field"] == "name" for code, body in results if code == 409), results
    with httpx.Client(base_url=server, timeout=60) as client:
        tasks = client.get("/v1/tasks", headers=ADMIN).json()
    assert sorted(t["name"] for t in tasks) == ["A.shared", "B.shared"]
