"""Who may call every route of the OpenAPI, and what everyone else gets (issue 15, item 3).

One row per (method, path) of ``app.openapi()``: who may call it, and what the rightful party,
an outsider (D, who works with nobody), a wrong partner (a partner of the owner that is no
party to the object) and a caller without a key get. An outsider never learns that an object
exists: 404, as for an unknown id or name, never 403 or 409. Every refusal writes nothing. A
route without a row fails ``test_every_route_has_a_row``, so a new route cannot ship unreviewed.

The world (``authz_world``): A owns A.q1..A.q4; B is A's partner and hosts q1's replica; C is A's
partner without a copy of q1 and the addressee of contract BC and of A's open offer; D is the
outsider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings
from tests.integration.api.authz_world import (  # noqa: F401 (a fixture)
    OUTSIDER,
    World,
    world_copy,
    world_for,
    world_settings,
    world_templates,
)
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.support.databases import BACKENDS
from tests.support.snapshot import registry_snapshot

ANONYMOUS = "anonymous"
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}

Route = tuple[str, str]  # (METHOD, path template as the OpenAPI names it)


@dataclass(frozen=True)
class Call:
    path: str
    body: Any = None


@dataclass(frozen=True)
class Row:
    """Who may call a route, and what each kind of caller gets.

    ``call`` builds the request for a given caller (some bodies name the caller, e.g. a
    failover to oneself). ``rightful`` is tried last: its call may change the world.
    """

    who: str
    call: Callable[[World, str], Call]
    rightful: tuple[str, int]
    outsider: int | None = 404
    wrong_partner: tuple[str, int] | None = None
    admin: int | None = None
    anonymous: int | None = 401
    # What the outsider's (successful) answer must be, for the lists: nothing of anyone else's.
    outsider_body: Any = None
    before: Callable[[World], None] | None = None

    def expectations(self) -> list[tuple[str, str, int]]:
        """(role, caller, status), refusals first, the rightful party last."""
        out = []
        if self.anonymous is not None:
            out.append(("anonymous", ANONYMOUS, self.anonymous))
        if self.outsider is not None:
            out.append(("outsider", OUTSIDER, self.outsider))
        if self.wrong_partner is not None:
            out.append(("wrong partner", *self.wrong_partner))
        if self.admin is not None and self.rightful[0] != "admin":
            out.append(("admin", "admin", self.admin))
        return [*out, ("rightful", *self.rightful)]


def fixed(path: str, body: Any = None) -> Callable[[World, str], Call]:
    return lambda _world, _caller: Call(path, body)


def on_contract(name: str, suffix: str = "", body: dict[str, Any] | None = None) -> Any:
    def call(world: World, _caller: str) -> Call:
        sent = None if body is None else {**body, "version": world.versions[name]}
        return Call(f"/v1/contracts/{world.contracts[name]}{suffix}", sent)

    return call


def on_offer(suffix: str = "", *, post: bool = False) -> Any:
    def call(world: World, _caller: str) -> Call:
        body = {"version": world.versions["offer"]} if post else None
        return Call(f"/v1/offers/{world.offer}{suffix}", body)

    return call


def on_movement(suffix: str = "", body: Callable[[World], Any] = lambda _: None) -> Any:
    return lambda world, _caller: Call(f"/v1/movements/{world.movement}{suffix}", body(world))


def failover_to_caller(world: World, caller: str) -> Call:
    # Each asks for q1 for itself: the wrong partner's ask is the takeover.
    to = caller if caller in "ABCD" else "B"
    return Call("/v1/movements", {"task": "A.q1", "to": to, "reason": "failover"})


def offer_under_ac(world: World, _caller: str) -> Call:
    # C offers A's q2, which it hosts, back to A; B and D are no parties to AC.
    return Call(
        "/v1/offers", {"contract_id": world.contracts["AC"], "tasks": ["A.q2"], "price": 0.9}
    )


def permit(action: str) -> Callable[[World, str], Call]:
    return lambda _world, caller: Call(
        f"/v1/permits/A.q1/{action}", {"replica": "A" if caller == "admin" else caller}
    )


COUNTER = {"price_min": 0.5, "price_max": 0.6}
PROPOSAL = {"partner": "A", "price_min": 0.8, "price_max": 1.0}

ROUTES: dict[Route, Row] = {
    ("GET", "/healthz"): Row(
        "anyone, without a key", fixed("/healthz"), (ANONYMOUS, 200), outsider=None, anonymous=None
    ),
    ("GET", "/readyz"): Row(
        "anyone, without a key", fixed("/readyz"), (ANONYMOUS, 200), outsider=None, anonymous=None
    ),
    # The audit log: the admin reads all of it, a participant the entries about itself
    # (tests/integration/api/test_audit.py checks which).
    ("GET", "/v1/audit"): Row(
        "any key holder (entries about itself), the admin (all)",
        fixed("/v1/audit"),
        ("A", 200),
        outsider=200,
        admin=200,
    ),
    ("POST", "/v1/participants/me/keys"): Row(
        "a participant, about itself",
        fixed("/v1/participants/me/keys"),
        ("D", 201),
        None,
        admin=403,
    ),
    # Participants: public profiles for every key holder; the rest is the admin's or one's own.
    ("GET", "/v1/participants"): Row(
        "any key holder (public profiles)", fixed("/v1/participants"), ("D", 200), outsider=None
    ),
    ("POST", "/v1/participants"): Row(
        "the admin",
        fixed("/v1/participants", {"name": "E", "capacity": 10}),
        ("admin", 201),
        outsider=403,
    ),
    ("GET", "/v1/participants/me"): Row(
        "a participant, about itself", fixed("/v1/participants/me"), ("D", 200), None, admin=403
    ),
    ("POST", "/v1/participants/me/heartbeat"): Row(
        "a participant, about itself",
        fixed("/v1/participants/me/heartbeat", {}),
        ("D", 200),
        None,
        admin=403,
    ),
    # Ending one's own fence after a declared failure (a participant not fenced: a heartbeat).
    ("POST", "/v1/participants/me/rejoin"): Row(
        "a participant, about itself",
        fixed("/v1/participants/me/rejoin"),
        ("D", 200),
        None,
        admin=403,
    ),
    ("GET", "/v1/participants/{name}"): Row(
        "the admin", fixed("/v1/participants/B"), ("admin", 200), outsider=403
    ),
    ("PATCH", "/v1/participants/{name}"): Row(
        "the admin",
        fixed("/v1/participants/B", {"status": "suspended"}),
        ("admin", 200),
        outsider=403,
    ),
    ("GET", "/v1/participants/{name}/endpoint"): Row(
        "the admin, the participant itself and those who work with it",
        fixed("/v1/participants/B/endpoint"),
        ("A", 200),
        wrong_partner=("C", 404),  # only a proposal between B and C
        admin=200,
    ),
    # Contracts: their two parties (and the admin); the addressee decides on the terms.
    ("POST", "/v1/contracts"): Row(
        "a participant", fixed("/v1/contracts", PROPOSAL), ("D", 201), None, admin=422
    ),
    ("GET", "/v1/contracts"): Row(
        "any key holder (its own contracts)",
        fixed("/v1/contracts"),
        ("A", 200),
        outsider=200,
        outsider_body=[],
    ),
    ("GET", "/v1/contracts/{contract_id}"): Row(
        "its parties and the admin", on_contract("AB"), ("B", 200), wrong_partner=("C", 404)
    ),
    ("POST", "/v1/contracts/{contract_id}/counter"): Row(
        "the party the terms are addressed to",
        on_contract("BC", "/counter", COUNTER),
        ("C", 200),
        wrong_partner=("A", 404),
    ),
    ("POST", "/v1/contracts/{contract_id}/accept"): Row(
        "the party the terms are addressed to",
        on_contract("BC", "/accept", {}),
        ("C", 200),
        wrong_partner=("A", 404),
    ),
    ("POST", "/v1/contracts/{contract_id}/reject"): Row(
        "the party the terms are addressed to",
        on_contract("BC", "/reject", {}),
        ("C", 200),
        wrong_partner=("A", 404),
    ),
    ("POST", "/v1/contracts/{contract_id}/terminate"): Row(
        "either party (or the admin)",
        on_contract("AB", "/terminate", {}),
        ("B", 200),
        wrong_partner=("C", 404),
    ),
    ("GET", "/v1/contracts/{contract_id}/history"): Row(
        "its parties and the admin",
        on_contract("AB", "/history"),
        ("B", 200),
        wrong_partner=("C", 404),
        admin=200,
    ),
    ("GET", "/v1/contracts/{contract_id}/ledger"): Row(
        "its parties and the admin",
        on_contract("AB", "/ledger"),
        ("A", 200),
        wrong_partner=("C", 404),
        admin=200,
    ),
    # Tasks: their owner and host (and the admin).
    ("POST", "/v1/tasks"): Row(
        "a participant (it owns the task)",
        fixed("/v1/tasks", {"name": "D.d1", "load": 1.0}),
        ("D", 201),
        None,
        admin=422,
    ),
    ("GET", "/v1/tasks"): Row(
        "any key holder (tasks it owns or hosts)",
        fixed("/v1/tasks"),
        ("A", 200),
        outsider=200,
        outsider_body=[],
    ),
    ("GET", "/v1/tasks/{name}"): Row(
        "its owner, its host, who is about to run it, the admin",
        fixed("/v1/tasks/A.q2"),
        ("C", 200),
        wrong_partner=("B", 404),
        admin=200,
    ),
    ("PATCH", "/v1/tasks/{name}"): Row(
        "its owner (load) and the admin (pin)",
        fixed("/v1/tasks/A.q1", {"load": 6.0}),
        ("A", 200),
        wrong_partner=("C", 404),
    ),
    # The owner's agent reports Spark's analysis; its host (C) and the admin see it but may not.
    ("PUT", "/v1/tasks/{name}/analysis"): Row(
        "its owner",
        fixed("/v1/tasks/A.q2/analysis", {"error": None}),
        ("A", 200),
        wrong_partner=("C", 403),
        admin=403,
    ),
    ("GET", "/v1/tasks/{name}/lease"): Row(
        "its owner, its host and the admin",
        fixed("/v1/tasks/A.q2/lease"),
        ("C", 200),
        wrong_partner=("B", 404),
    ),
    # Offers: their sender and addressee; the addressee decides, the sender withdraws.
    ("POST", "/v1/offers"): Row(
        "a party to the offer's active contract, for tasks it hosts",
        offer_under_ac,
        ("C", 201),
        wrong_partner=("B", 404),
    ),
    ("GET", "/v1/offers"): Row(
        "any key holder (offers it made or received)",
        fixed("/v1/offers"),
        ("C", 200),
        outsider=200,
        outsider_body=[],
    ),
    ("GET", "/v1/offers/{offer_id}"): Row(
        "its sender, its addressee and the admin",
        on_offer(),
        ("C", 200),
        wrong_partner=("B", 404),
        admin=200,
    ),
    ("POST", "/v1/offers/{offer_id}/accept"): Row(
        "its addressee",
        on_offer("/accept", post=True),
        ("C", 200),
        wrong_partner=("B", 404),
    ),
    ("POST", "/v1/offers/{offer_id}/reject"): Row(
        "its addressee",
        on_offer("/reject", post=True),
        ("C", 200),
        wrong_partner=("B", 404),
    ),
    ("POST", "/v1/offers/{offer_id}/withdraw"): Row(
        "its sender",
        on_offer("/withdraw", post=True),
        ("A", 200),
        wrong_partner=("B", 404),
    ),
    # Movements: their source and target (and the admin); a takeover only by the replica.
    ("POST", "/v1/movements"): Row(
        "the host of the task's replica, once the registry sees the host failed (failover)",
        failover_to_caller,
        ("B", 201),
        wrong_partner=("C", 404),
        before=lambda world: world.fail("A"),
    ),
    ("GET", "/v1/movements"): Row(
        "any key holder (movements from or to it)",
        fixed("/v1/movements"),
        ("B", 200),
        outsider=200,
        outsider_body=[],
    ),
    ("GET", "/v1/movements/{movement_id}"): Row(
        "its source, its target and the admin",
        on_movement(),
        ("B", 200),
        wrong_partner=("C", 404),
        admin=200,
    ),
    ("POST", "/v1/movements/{movement_id}/commit"): Row(
        "its target",
        on_movement("/commit", lambda world: {"epoch": world.epoch}),
        ("B", 200),
        wrong_partner=("C", 404),
    ),
    ("POST", "/v1/movements/{movement_id}/abort"): Row(
        "its source, its target and the admin",
        on_movement("/abort"),
        ("A", 200),
        wrong_partner=("C", 404),
    ),
    # Replicas: the owner places them; each host reports its own.
    ("POST", "/v1/tasks/{name}/replicas"): Row(
        "the task's owner (and the admin)",
        fixed("/v1/tasks/A.q1/replicas", {"k": 2}),
        ("A", 201),
        wrong_partner=("C", 404),
    ),
    ("GET", "/v1/replicas"): Row(
        "any key holder (replicas it hosts or owns)",
        fixed("/v1/replicas"),
        ("B", 200),
        outsider=200,
        outsider_body=[],
    ),
    ("PUT", "/v1/replicas/{task}/state"): Row(
        "the replica's host",
        fixed("/v1/replicas/A.q1/state", {"state": "UP_FAILURE"}),
        ("B", 200),
        wrong_partner=("C", 404),
        admin=422,
    ),
    # Permits: the hosts of the fragment's copies (and the admin).
    ("POST", "/v1/permits/{fragment}/request"): Row(
        "a host of a copy of the fragment, under its own copy's name",
        permit("request"),
        ("B", 200),
        wrong_partner=("C", 404),
        admin=200,
    ),
    ("POST", "/v1/permits/{fragment}/release"): Row(
        "the permit's holder",
        permit("release"),
        ("A", 200),
        wrong_partner=("C", 404),
    ),
    ("GET", "/v1/permits"): Row("the admin", fixed("/v1/permits"), ("admin", 200), outsider=403),
    # The data plane: a token for the operations the registry's records name the caller for
    # (app/dataplane/service.py); here B, the target of the prepared movement of q4, asks to
    # release it from A. The admin is no party to the data plane.
    ("POST", "/v1/dataplane/tokens"): Row(
        "the party the records name for the operation (a prepared movement's target releases)",
        lambda world, _caller: Call(
            "/v1/dataplane/tokens",
            {"operations": ["release"], "task": "A.q4", "movement": world.movement},
        ),
        ("B", 200),
        wrong_partner=("C", 404),
        admin=403,
    ),
    ("GET", "/v1/dataplane/key"): Row(
        "any key holder", fixed("/v1/dataplane/key"), ("A", 200), outsider=200
    ),
}


def uncovered(openapi: Mapping[str, Any], table: Mapping[Route, Row]) -> dict[str, list[Route]]:
    """The routes of ``openapi`` without a row, and the rows naming no route."""
    routes = {
        (method.upper(), path)
        for path, item in openapi.get("paths", {}).items()
        for method in item
        if method in HTTP_METHODS
    }
    return {
        "routes without a row": sorted(routes - set(table)),
        "rows without a route": sorted(set(table) - routes),
    }


def test_every_route_has_a_row(tmp_path: Path) -> None:
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path}/r.db", admin_key=ADMIN_KEY, environment="test")
    )
    assert uncovered(app.openapi(), ROUTES) == {
        "routes without a row": [],
        "rows without a route": [],
    }, "add a row to ROUTES saying who may call the route and what everyone else gets"


def test_the_checker_finds_a_new_route_and_a_stale_row() -> None:
    row = ROUTES[("GET", "/healthz")]
    openapi = {
        "paths": {
            "/healthz": {"get": {}, "parameters": []},
            "/v1/secrets/{id}": {"get": {}, "delete": {}, "summary": "new"},
        }
    }
    table = {("GET", "/healthz"): row, ("POST", "/v1/gone"): row}
    assert uncovered(openapi, table) == {
        "routes without a row": [("DELETE", "/v1/secrets/{id}"), ("GET", "/v1/secrets/{id}")],
        "rows without a route": [("POST", "/v1/gone")],
    }
    assert uncovered(openapi, {**table, ("GET", "/v1/secrets/{id}"): row})[
        "routes without a row"
    ] == [("DELETE", "/v1/secrets/{id}")]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from world_copy(request)


@pytest.fixture
def settings(db_url: str) -> Settings:
    return world_settings(db_url)


@pytest.fixture
def world(request: pytest.FixtureRequest, api: Api, db_url: str) -> World:
    return world_for(request, api, db_url)


def send(world: World, method: str, call: Call, caller: str) -> Any:
    headers = {} if caller == ANONYMOUS else world.api.headers(caller)
    kwargs: dict[str, Any] = {"headers": headers}
    if call.body is not None:
        kwargs["json"] = call.body
    return world.api.client.request(method, call.path, **kwargs)


@pytest.mark.parametrize("route", list(ROUTES), ids=[f"{m} {p}" for m, p in ROUTES])
def test_who_may_call_each_route(world: World, route: Route) -> None:
    method, _ = route
    row = ROUTES[route]
    if row.before is not None:
        row.before(world)
    before = registry_snapshot(world.db_url)
    refused: list[str] = []
    for role, caller, status in row.expectations():
        if status < 400 and refused:
            # The refusals since the last snapshot wrote nothing.
            assert registry_snapshot(world.db_url) == before, f"a refusal wrote: {refused}"
            refused = []
        call = row.call(world, caller)
        response = send(world, method, call, caller)
        assert response.status_code == status, (
            f"{method} {call.path} as the {role} ({caller}): expected {status}, "
            f"got {response.status_code} {response.text}"
        )
        if status >= 400:
            refused.append(role)
        elif role != "rightful":
            before = registry_snapshot(world.db_url)
        if role == "outsider" and row.outsider_body is not None:
            assert response.json() == row.outsider_body
