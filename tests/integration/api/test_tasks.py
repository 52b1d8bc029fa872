"""Tasks through the API: fragments as registry records, and declared-load changes."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from app.db.session import unit_of_work
from app.models import AuditEntry, LedgerEntry
from tests.integration.api.conftest import Api
from tests.support.snapshot import registry_snapshot


def declare(api: Api, who: str, body: dict[str, Any]) -> dict[str, Any]:
    r = api.post(who, "/v1/tasks", {"load": 5.0, **body})
    assert r.status_code == 201, r.text
    return dict(r.json())


def patch(api: Api, who: str, name: str, body: Any) -> Any:
    return api.client.patch(f"/v1/tasks/{name}", json=body, headers=api.headers(who))


def audit(db_url: str, action: str) -> list[tuple[str, dict[str, Any]]]:
    with unit_of_work(db_url) as session:
        rows = session.execute(
            select(AuditEntry.actor, AuditEntry.detail)
            .where(AuditEntry.action == action)
            .order_by(AuditEntry.id)
        ).all()
        return [(actor, dict(detail)) for actor, detail in rows]


def test_a_source_and_its_readers_are_recorded_with_defaults(abc: Api, db_url: str) -> None:
    conns = declare(abc, "A", {"name": "A.conns", "load": 0, "fragment": "generator"})
    assert (conns["fragment"], conns["params"], conns["inputs"]) == (
        "generator",
        {"seed": 7, "rate": 60.0, "scan_rate": 6.0},
        [],
    )
    q01 = declare(
        abc,
        "A",
        {
            "name": "A.q01",
            "fragment": "connections_per_source",
            "params": {"threshold": 40},
            "inputs": [{"task": "A.conns"}],
        },
    )
    assert q01["params"] == {"window_seconds": 10, "threshold": 40}
    # Each input says what its stream carries (the fragment its task runs) and who serves it.
    assert q01["inputs"] == [
        {
            "task": "A.conns",
            "fragment": "generator",
            "schema": "src_ip STRING, dst_ip STRING, dst_port INT, stime TIMESTAMP",
            "event_time": "stime",
            "served_by": "A",
            "active_copies": [],
        }
    ]
    assert abc.get("A", "/v1/tasks/A.q01").json() == q01
    listed = {t["name"]: t for t in abc.get("A", "/v1/tasks").json()}
    assert listed["A.q01"] == q01
    plain = declare(abc, "A", {"name": "A.q03"})
    assert (plain["fragment"], plain["params"], plain["inputs"]) == (None, {}, [])
    created = audit(db_url, "task.created")
    assert [actor for actor, _ in created] == ["participant:A"] * 3
    assert created[1][1] == {
        "name": "A.q01",
        "load": 5.0,
        "fragment": "connections_per_source",
        "params": {"window_seconds": 10, "threshold": 40},
        "inputs": [{"task": "A.conns"}],
    }


BAD: list[tuple[str, dict[str, Any], int, str, str]] = [
    ("unknown fragment", {"fragment": "oracle"}, 422, "fragment", "unknown fragment 'oracle'"),
    (
        "unknown parameter",
        {"fragment": "generator", "params": {"speed": 2}},
        422,
        "params.speed",
        "no parameter",
    ),
    (
        "parameter out of range",
        {
            "fragment": "connections_per_source",
            "params": {"window_seconds": 0},
            "inputs": [{"task": "A.conns"}],
        },
        422,
        "params.window_seconds",
        "at least 1",
    ),
    (
        "parameter of the wrong type",
        {"fragment": "generator", "params": {"seed": "x"}},
        422,
        "params.seed",
        "number",
    ),
    ("reader without input", {"fragment": "connections_per_source"}, 422, "inputs", "at least 1"),
    (
        "source with an input",
        {"fragment": "generator", "inputs": [{"task": "A.conns"}]},
        422,
        "inputs",
        "is a source",
    ),
    (
        "unknown input",
        {"fragment": "connections_per_source", "inputs": [{"task": "nope"}]},
        422,
        "inputs[0].task",
        "A owns no task named 'nope'",
    ),
    (
        "someone else's input reads as unknown",
        {"fragment": "connections_per_source", "inputs": [{"task": "B.conns"}]},
        422,
        "inputs[0].task",
        "A owns no task named 'B.conns'",
    ),
    (
        "reads itself",
        {"fragment": "connections_per_source", "inputs": [{"task": "A.new"}]},
        422,
        "inputs[0].task",
        "its own output",
    ),
    (
        "input runs nothing",
        {"fragment": "connections_per_source", "inputs": [{"task": "A.plain"}]},
        422,
        "inputs[0].task",
        "runs no fragment",
    ),
    (
        "input of the wrong kind",
        {"fragment": "prefix_scanners", "inputs": [{"task": "A.conns"}]},
        422,
        "inputs[0].task",
        "reads port_counts",
    ),
    (
        "malformed input",
        {"fragment": "connections_per_source", "inputs": [{"name": "A.conns"}]},
        422,
        "inputs.0.task",
        "required",
    ),
    ("params without fragment", {"params": {"seed": 1}}, 422, "params", "names none"),
    ("inputs without fragment", {"inputs": [{"task": "A.conns"}]}, 422, "inputs", "names none"),
]


@pytest.mark.parametrize(
    ("case", "extra", "status", "field", "words"), BAD, ids=[c[0] for c in BAD]
)
def test_bad_fragment_is_refused_and_writes_nothing(
    abc: Api, db_url: str, case: str, extra: dict[str, Any], status: int, field: str, words: str
) -> None:
    declare(abc, "A", {"name": "A.conns", "load": 0, "fragment": "generator"})
    declare(abc, "A", {"name": "A.plain"})
    declare(abc, "B", {"name": "B.conns", "load": 0, "fragment": "generator"})
    before = registry_snapshot(db_url)
    r = abc.post("A", "/v1/tasks", {"name": "A.new", "load": 5.0, **extra})
    assert r.status_code == status, r.text
    assert r.json()["field"] == field
    assert words in r.json()["detail"]
    assert registry_snapshot(db_url) == before


def test_owner_and_admin_change_the_declared_load(abc: Api, db_url: str) -> None:
    declare(abc, "B", {"name": "B.q1", "load": 5.0})
    r = patch(abc, "B", "B.q1", {"load": 20.0})  # B's input quadruples
    assert r.status_code == 200, r.text
    assert r.json()["load"] == 20.0
    assert abc.get("B", "/v1/tasks/B.q1").json()["load"] == 20.0
    r = patch(abc, "admin", "B.q1", {"load": 10.0, "pinned": True})
    assert r.status_code == 200, r.text
    assert (r.json()["load"], r.json()["pinned"]) == (10.0, True)
    assert audit(db_url, "task.load_changed") == [
        ("participant:B", {"name": "B.q1", "from": 5.0, "to": 20.0}),
        ("admin", {"name": "B.q1", "from": 20.0, "to": 10.0}),
    ]
    assert [a for a, _ in audit(db_url, "task.pinned")] == ["admin"]
    # The same load again changes nothing and audits nothing.
    assert patch(abc, "B", "B.q1", {"load": 10.0}).status_code == 200
    assert len(audit(db_url, "task.load_changed")) == 2


def test_load_change_by_others_is_refused_and_writes_nothing(abc: Api, db_url: str) -> None:
    ab = abc.propose("A", "B", price_min=0.2, price_max=0.3)
    assert abc.post("B", f"/v1/contracts/{ab['id']}/accept", {"version": 1}).status_code == 200
    declare(abc, "A", {"name": "A.q1", "load": 5.0})
    offer = abc.post("A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25})
    accepted = abc.post("B", f"/v1/offers/{offer.json()['id']}/accept", {"version": 1})
    mid = accepted.json()["movement_ids"][0]
    assert abc.post("B", f"/v1/movements/{mid}/commit", {"epoch": 1}).status_code == 200
    before = registry_snapshot(db_url)
    cases = [
        ("B", {"load": 50.0}, 403, "load"),  # the host sees the task but does not own it
        ("C", {"load": 50.0}, 404, "name"),  # a stranger is not told it exists
        ("C", {"pinned": True}, 404, "name"),
        ("A", {"pinned": True}, 403, "pinned"),  # only an admin pins
        ("A", {"load": 1.0, "pinned": True}, 403, "pinned"),  # all or nothing
        ("A", {"load": -1}, 422, "load"),
        ("A", {"load": "lots"}, 422, "load"),
        ("A", {}, 422, "body"),
        ("A", {"owner": "B"}, 422, "owner"),
    ]
    for who, body, status, field in cases:
        r = patch(abc, who, "A.q1", body)
        assert (r.status_code, r.json()["field"]) == (status, field), (who, body, r.text)
    assert patch(abc, "A", "nope", {"load": 1.0}).status_code == 404
    assert registry_snapshot(db_url) == before


def test_payments_before_a_load_change_are_charged_at_the_old_load(abc: Api, db_url: str) -> None:
    ab = abc.propose("A", "B", price_min=0.2, price_max=0.3)
    abc.post("B", f"/v1/contracts/{ab['id']}/accept", {"version": 1})
    declare(abc, "A", {"name": "A.q1", "load": 10.0})
    offer = abc.post("A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25})
    mid = abc.post("B", f"/v1/offers/{offer.json()['id']}/accept", {"version": 1}).json()[
        "movement_ids"
    ][0]
    assert abc.post("B", f"/v1/movements/{mid}/commit", {"epoch": 1}).status_code == 200
    assert patch(abc, "A", "A.q1", {"load": 40.0}).status_code == 200
    assert abc.post("A", "/v1/participants/me/heartbeat", {}).status_code == 200
    with unit_of_work(db_url) as session:
        loads = session.scalars(select(LedgerEntry.load).order_by(LedgerEntry.id)).all()
    # The change charged the time since the commit at the old load; from then on, the new one.
    assert list(loads) == [10.0, 40.0]


def test_names_are_per_owner_and_tell_nobody_about_other_owners(abc: Api, db_url: str) -> None:
    """Issue 15, item 3: a task's name is ``<owner>.<local>``. Two owners use the same local
    name without meeting, and what one is told never depends on the other's tasks."""
    mine = declare(abc, "A", {"name": "A.shared"})
    theirs = declare(abc, "B", {"name": "B.shared"})
    assert (mine["owner"], theirs["owner"]) == ("A", "B")
    # A's own duplicate is a conflict about A's own task; B's name is not A's to take.
    dup = abc.post("A", "/v1/tasks", {"name": "A.shared", "load": 1.0})
    assert (dup.status_code, dup.json()["field"]) == (409, "name")
    before = registry_snapshot(db_url)
    taken = abc.post("A", "/v1/tasks", {"name": "B.shared", "load": 1.0})
    free = abc.post("A", "/v1/tasks", {"name": "B.nothing", "load": 1.0})
    # Taken or free, B's names answer A alike, word for word but the name itself.
    assert (taken.status_code, taken.json()["field"]) == (422, "name")
    assert taken.json()["detail"].replace("shared", "N") == free.json()["detail"].replace(
        "nothing", "N"
    )
    assert "must start with 'A.'" in taken.json()["detail"]
    for name in ("shared", "A.sub.shared", "A.", ".shared"):
        # "A.sub.shared" could be participant "A.sub"'s task "shared": never A's.
        r = abc.post("A", "/v1/tasks", {"name": name, "load": 1.0})
        assert (r.status_code, r.json()["field"]) == (422, "name"), (name, r.text)
    # Reads: each sees its own, the other's is an unknown name.
    assert abc.get("B", "/v1/tasks/A.shared").status_code == 404
    assert abc.get("B", "/v1/tasks/A.nothing").json() == abc.get(
        "B", "/v1/tasks/A.shared"
    ).json() | {"detail": "task 'A.nothing' not found"}
    assert [t["name"] for t in abc.get("A", "/v1/tasks").json()] == ["A.shared"]
    assert [t["name"] for t in abc.get("B", "/v1/tasks").json()] == ["B.shared"]
    assert registry_snapshot(db_url) == before
