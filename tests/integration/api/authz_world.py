"""A small federation in which every kind of object exists, for the authorization tests.

Roles (issue 15, item 3): A owns the tasks; B is A's partner and hosts the replica of ``A.q1``;
C is A's partner too, with a replica-hosting contract but no copy of ``A.q1`` (the "wrong
partner" that tried to take it over); D works with nobody (the outsider).

- ``AB`` (replica hosting) and ``AC`` (replica hosting) are active; ``BC`` is proposed by B.
- ``A.q1``: A's, hosted by A, its replica on B; A holds its reconciliation permit as ``A``.
- ``A.q2``: A's, hosted by C (A sold it under ``AC``).
- ``A.q3``: A's, in A's open offer to C (``offer``).
- ``A.q4``: A's, sold to B: the movement A to B is prepared (``movement``), not committed.

Everyone has heartbeated a moment ago: the registry sees them online.

The world is built once per backend and run (``WorldTemplates``): each test gets its own copy of
the database (a file copy on SQLite, ``CREATE DATABASE ... TEMPLATE`` on PostgreSQL), so a test
may change anything, and 40 routes do not pay 40 builds.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.db.base import Base, utcnow
from app.db.session import dispose_engines, get_engine, unit_of_work
from app.main import create_app
from app.models import Participant
from app.participants import failures
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.support.databases import _truncate_all as truncate_all

OWNER, REPLICA_HOST, WRONG_PARTNER, OUTSIDER = "A", "B", "C", "D"


@dataclass
class World:
    api: Api
    db_url: str
    contracts: dict[str, int] = field(default_factory=dict)
    # The version each contract (and the open offer, "offer") is at once the world is built.
    versions: dict[str, int] = field(default_factory=dict)
    offer: int = 0
    movement: int = 0
    epoch: int = 0

    def ok(self, response: Any, status: int = 200) -> Any:
        assert response.status_code == status, response.text
        return response.json()

    def contract(self, proposer: str, partner: str, *, accept: bool) -> int:
        terms = {"availability": {"recovery": "precise", "replica_hosting": True}}
        made = self.api.propose(proposer, partner, **terms)
        if accept:
            self.ok(self.api.post(partner, f"/v1/contracts/{made['id']}/accept", {"version": 1}))
        return int(made["id"])

    def task(self, name: str) -> None:
        self.ok(self.api.post(OWNER, "/v1/tasks", {"name": name, "load": 5.0}), 201)

    def sell(self, task: str, contract: str, to: str, *, commit: bool) -> dict[str, Any]:
        body = {"contract_id": self.contracts[contract], "tasks": [task], "price": 0.9}
        offer = self.ok(self.api.post(OWNER, "/v1/offers", body), 201)
        accepted = self.ok(
            self.api.post(to, f"/v1/offers/{offer['id']}/accept", {"version": offer["version"]})
        )
        movement = self.ok(self.api.get(to, f"/v1/movements/{accepted['movement_ids'][0]}"))
        if commit:
            path = f"/v1/movements/{movement['id']}/commit"
            self.ok(self.api.post(to, path, {"epoch": movement["epoch"]}))
        return movement

    def fail(self, name: str) -> None:
        """The registry last heard of ``name`` an hour ago, and its failure sweeper's round (run
        here, not waited for) declares it failed."""
        with unit_of_work(self.db_url) as session:
            participant = session.query(Participant).filter_by(name=name).one()
            participant.last_heartbeat_at = utcnow() - timedelta(hours=1)
        with unit_of_work(self.db_url) as session:
            failed = failures.sweep(session, checked_until=utcnow(), interval_seconds=60, misses=3)
            assert [p.name for p in failed] == [name]


def build_world(api: Api, db_url: str) -> World:
    world = World(api=api, db_url=db_url)
    for name in (OWNER, REPLICA_HOST, WRONG_PARTNER, OUTSIDER):
        api.register(name)
    world.contracts["AB"] = world.contract(OWNER, REPLICA_HOST, accept=True)
    world.task("A.q1")
    # Placed while B is A's only replica-hosting partner: the replica lands on B.
    placed = world.ok(api.post(OWNER, "/v1/tasks/A.q1/replicas", {"k": 1}), 201)
    assert [r["host"] for r in placed] == [REPLICA_HOST]
    world.contracts["AC"] = world.contract(OWNER, WRONG_PARTNER, accept=True)
    world.contracts["BC"] = world.contract(REPLICA_HOST, WRONG_PARTNER, accept=False)
    world.ok(api.post(OWNER, "/v1/permits/A.q1/request", {"replica": OWNER}))
    for name in ("A.q2", "A.q3", "A.q4"):
        world.task(name)
    world.sell("A.q2", "AC", WRONG_PARTNER, commit=True)
    prepared = world.sell("A.q4", "AB", REPLICA_HOST, commit=False)
    world.movement, world.epoch = int(prepared["id"]), int(prepared["epoch"])
    body = {"contract_id": world.contracts["AC"], "tasks": ["A.q3"], "price": 0.9}
    offer = world.ok(api.post(OWNER, "/v1/offers", body), 201)
    world.offer, world.versions["offer"] = int(offer["id"]), int(offer["version"])
    for name, cid in world.contracts.items():
        world.versions[name] = int(world.ok(api.get("admin", f"/v1/contracts/{cid}"))["version"])
    for name in (OWNER, REPLICA_HOST, WRONG_PARTNER, OUTSIDER):
        world.ok(api.post(name, "/v1/participants/me/heartbeat", {}))
    return world


def world_settings(db_url: str) -> Settings:
    # A slow machine must not make anyone "suspect" or "failed" by itself during a test: the
    # worlds are built once and restored for minutes of tests, and the service's failure
    # sweeper declares a member failed once its window (3 intervals) passes without a heartbeat.
    return Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        environment="test",
        heartbeat_interval_seconds=3600,
    )


class WorldTemplates:
    """One built world per backend, restored for each test."""

    def __init__(self, request: pytest.FixtureRequest, workdir: Path) -> None:
        self._request = request
        self._workdir = workdir
        self._built: dict[str, tuple[str, World]] = {}
        # PostgreSQL: the world's rows, table by table (re-inserting ~100 rows is far cheaper
        # than creating and dropping a database per test on a loaded machine).
        self._rows: dict[str, list[dict[str, Any]]] = {}

    def _template(self, backend: str) -> tuple[str, World]:
        if backend not in self._built:
            if backend == "sqlite":
                path = self._workdir / "world.db"
                shutil.copy(self._request.getfixturevalue("sqlite_template"), path)
                url = f"sqlite:///{path}"
            else:
                # The run's PostgreSQL database: its fixture checks that the server is there.
                url = str(self._request.getfixturevalue("postgres_database"))
                truncate_all(url)
            with TestClient(create_app(world_settings(url))) as client:
                world = build_world(Api(client=client, keys={}), url)
            if backend == "sqlite":
                dispose_engines(url)  # the file is copied whole from now on
            else:
                with get_engine(url).connect() as conn:
                    self._rows = {
                        table.name: [dict(row) for row in conn.execute(sa.select(table)).mappings()]
                        for table in Base.metadata.sorted_tables
                    }
            self._built[backend] = (url, world)
        return self._built[backend]

    def copy(self, backend: str) -> tuple[str, World]:
        """A fresh copy of the backend's world: its URL and the world's names and ids."""
        url, world = self._template(backend)
        if backend == "sqlite":
            path = self._workdir / f"{uuid.uuid4().hex}.db"
            shutil.copy(make_url(url).database or "", path)
            return f"sqlite:///{path}", world
        truncate_all(url)
        with get_engine(url).begin() as conn:
            for table in Base.metadata.sorted_tables:
                rows = self._rows[table.name]
                if rows:
                    conn.execute(table.insert(), rows)
                if "id" in table.c and rows:
                    # The next row gets the next id, as in the world that was built.
                    conn.execute(
                        sa.text(
                            f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                            f'(SELECT max(id) FROM "{table.name}"))'
                        )
                    )
        return url, world


@pytest.fixture(scope="session")
def world_templates(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorldTemplates]:
    yield WorldTemplates(request, tmp_path_factory.mktemp("authz-worlds"))


def world_copy(request: pytest.FixtureRequest) -> Iterator[str]:
    """The body of a test module's ``db_url`` fixture: a copy of the world on the backend the
    test is parametrized with (so the ``postgres`` marker still applies)."""
    templates: WorldTemplates = request.getfixturevalue("world_templates")
    url, world = templates.copy(request.param)
    request.node.stash[WORLD] = world
    yield url
    if request.param == "sqlite":
        dispose_engines(url)


WORLD = pytest.StashKey[World]()


def world_for(request: pytest.FixtureRequest, api: Api, db_url: str) -> World:
    """The test's copy of the world, driven through its own client."""
    template = request.node.stash[WORLD]
    api.keys.update(template.api.keys)
    return replace(template, api=api, db_url=db_url)
