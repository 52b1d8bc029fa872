"""100 concurrent clients against the live service on PostgreSQL (issue 15, no stalls): every
one is answered, none with a 500; an overloaded worker answers 503 with Retry-After at once
instead of queueing requests behind a pool for 30 s."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY
from tests.support.databases import _truncate_all
from tests.support.event_loop import run_coroutine
from tests.support.live_server import serve

pytestmark = pytest.mark.postgres

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
# A liveness bound, not a timing claim: before issue 15 these requests stalled for ~30 s and
# then failed with the pool's timeout; now each is answered (by work or by a 503) long before.
DEADLINE_SECONDS = 20.0


def seed(base: str) -> tuple[dict[str, dict[str, str]], int]:
    with httpx.Client(base_url=base, timeout=30) as client:
        keys = {}
        for name in ("A", "B"):
            r = client.post("/v1/participants", json={"name": name, "capacity": 100}, headers=ADMIN)
            assert r.status_code == 201, r.text
            keys[name] = {"Authorization": f"Bearer {r.json()['api_key']}"}
        r = client.post(
            "/v1/contracts",
            json={"partner": "B", "price_min": 0.8, "price_max": 1.0},
            headers=keys["A"],
        )
        assert r.status_code == 201, r.text
        return keys, int(r.json()["id"])


def live(postgres_database: str, **overrides: float) -> Settings:
    _truncate_all(postgres_database)
    settings = Settings(database_url=postgres_database, admin_key=ADMIN_KEY, environment="test")
    return settings.model_copy(update=overrides)


@pytest.fixture
def service(postgres_database: str) -> Iterator[str]:
    with serve(live(postgres_database)) as base:
        yield base


def test_a_hundred_concurrent_clients_are_all_answered_without_a_500(service: str) -> None:
    keys, cid = seed(service)

    async def one(client: httpx.AsyncClient, i: int) -> int:
        who = "A" if i % 2 else "B"
        kind = i % 5
        if kind == 0:  # the contested accept: one wins, the rest get 409
            r = await client.post(
                f"/v1/contracts/{cid}/accept", json={"version": 1}, headers=keys["B"]
            )
        elif kind == 1:
            r = await client.get("/v1/contracts", headers=keys[who])
        elif kind == 2:
            r = await client.get(f"/v1/contracts/{cid}", headers=keys[who])
        elif kind == 3:
            r = await client.post(
                "/v1/tasks", json={"name": f"{who}.t{i}", "load": 1.0}, headers=keys[who]
            )
        else:
            r = await client.get("/v1/participants", headers=keys[who])
        if r.status_code == 503:
            assert r.headers["retry-after"] and r.json()["detail"], r.text
        return r.status_code

    async def hundred() -> list[int]:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(base_url=service, timeout=60, limits=limits) as client:
            return list(
                await asyncio.wait_for(
                    asyncio.gather(*(one(client, i) for i in range(100))), DEADLINE_SECONDS
                )
            )

    statuses = Counter(run_coroutine(hundred()))
    assert sum(statuses.values()) == 100
    assert set(statuses) <= {200, 201, 409, 503}, statuses
    # The accepts are contested: exactly one of the 20 won, unless every one was shed.
    assert statuses[409] <= 19
    with httpx.Client(base_url=service, timeout=30) as client:
        contract = client.get(f"/v1/contracts/{cid}", headers=keys["A"]).json()
    assert contract["status"] == "active" or statuses[503] > 0


def test_an_overloaded_worker_sheds_with_503_and_retry_after_at_once(
    postgres_database: str,
) -> None:
    """Two admitted accepts wait on a row lock; the next requests find no slot and are told to
    retry, instead of queueing behind them; once the lock goes, the two finish."""
    settings = live(postgres_database, max_concurrent_requests=2, request_queue_seconds=0.2)
    locker = sa.create_engine(postgres_database)
    with serve(settings) as base:
        keys, cid = seed(base)

        async def scenario() -> tuple[list[int], list[httpx.Response], int]:
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                with locker.connect() as conn:
                    transaction = conn.begin()
                    conn.execute(
                        sa.text("SELECT id FROM contracts WHERE id = :id FOR UPDATE"), {"id": cid}
                    )
                    blocked = [
                        asyncio.create_task(
                            client.post(
                                f"/v1/contracts/{cid}/accept",
                                json={"version": 1},
                                headers=keys["B"],
                            )
                        )
                        for _ in range(2)
                    ]
                    await wait_for_lock_waiters(2)
                    shed = await asyncio.gather(
                        *(client.get("/v1/contracts", headers=keys["A"]) for _ in range(10))
                    )
                    health = (await client.get("/healthz")).status_code
                    transaction.commit()
                done = [r.status_code for r in await asyncio.gather(*blocked)]
                return done, list(shed), health

        async def wait_for_lock_waiters(n: int) -> None:
            deadline = time.monotonic() + DEADLINE_SECONDS
            query = sa.text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            # From another connection: statistics views are a snapshot within a transaction.
            with locker.connect().execution_options(isolation_level="AUTOCOMMIT") as watcher:
                while watcher.execute(query).scalar_one() < n:
                    assert time.monotonic() < deadline, "the accepts never reached the lock"
                    await asyncio.sleep(0.05)

        done, shed, health = run_coroutine(scenario())
    locker.dispose()
    assert sorted(done) == [200, 409]  # one accept won, the other saw the new version
    assert [r.status_code for r in shed] == [503] * 10
    assert all(r.headers["retry-after"] == "1" for r in shed)
    assert "at capacity" in shed[0].json()["detail"]
    assert health == 200  # liveness is never shed
