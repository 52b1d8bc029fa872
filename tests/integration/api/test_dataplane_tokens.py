"""Who the registry issues data-plane tokens to (app/dataplane/service.py), from its records,
through the REST endpoint: a prepared movement's target releases, its source and target ship
checkpoints, a consumer's host reads and acknowledges as that consumer, a producer's host (or
the target taking it over) appends; everyone else is refused (404 when no party, 403 when the
operation is not theirs) and nothing is written. An issued token verifies with the published
key and names the serving participant."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.dataplane.tokens import Grant, load_public_key, verify
from app.db.base import utcnow
from app.db.session import unit_of_work
from app.models import Participant
from app.participants import failures
from tests.integration.api.conftest import Api
from tests.support.snapshot import registry_snapshot


def ask(api: Api, who: str, **body: Any) -> tuple[int, Any]:
    response = api.post(who, "/v1/dataplane/tokens", body)
    return response.status_code, response.json()


@pytest.fixture
def moving(api: Api) -> tuple[Api, int]:
    """A owns A.src (a generator) and A.x (reading it), sold to B: movement A -> B prepared.
    C is A's partner with nothing to do with A.x; D works with nobody."""
    for name in ("A", "B", "C", "D"):
        api.register(name)
    for partner in ("B", "C"):
        made = api.propose("A", partner)
        accepted = api.post(partner, f"/v1/contracts/{made['id']}/accept", {"version": 1})
        assert accepted.status_code == 200, accepted.text
    for body in (
        {"name": "A.src", "load": 1.0, "fragment": "generator"},
        {
            "name": "A.x",
            "load": 5.0,
            "fragment": "connections_per_source",
            "inputs": [{"task": "A.src"}],
        },
    ):
        assert api.post("A", "/v1/tasks", body).status_code == 201
    return api, sell(api, "A.x", "B")


def commit(api: Api, target: str, movement: int) -> None:
    epoch = api.get(target, f"/v1/movements/{movement}").json()["epoch"]
    committed = api.post(target, f"/v1/movements/{movement}/commit", {"epoch": epoch})
    assert committed.status_code == 200, committed.text


def sell(api: Api, task: str, to: str) -> int:
    """A offers ``task`` to its partner ``to``, who accepts: the prepared movement's id."""
    contract = next(
        c["id"] for c in api.get("A", "/v1/contracts").json() if to in (c["proposer"], c["partner"])
    )
    offer = api.post("A", "/v1/offers", {"contract_id": contract, "tasks": [task], "price": 0.9})
    assert offer.status_code == 201, offer.text
    accepted = api.post(to, f"/v1/offers/{offer.json()['id']}/accept", {"version": 1}).json()
    return int(accepted["movement_ids"][0])


def test_who_gets_which_token_while_a_movement_is_prepared_and_after_it(
    moving: tuple[Api, int], db_url: str
) -> None:
    api, movement = moving
    release = {"operations": ["release"], "task": "A.x", "movement": movement}
    ship = {"operations": ["checkpoint"], "task": "A.x", "movement": movement}
    read_input = {"operations": ["read"], "stream": "A.src.out"}
    ack_input = {"operations": ["ack"], "stream": "A.src.out", "consumer": "A.x"}
    append_output = {"operations": ["append", "fence"], "stream": "A.x.out"}
    retire = {"operations": ["retire"], "task": "A.x", "movement": movement}

    before = registry_snapshot(db_url)
    refusals = [
        ("A", release, 403),  # the source does not release to itself
        ("C", release, 404),  # no party to the movement: as for an unknown one
        ("D", ship, 404),
        ("B", {**ack_input, "consumer": "A.y"}, 403),  # only as the consumer it runs
        ("B", {"operations": ["append"], "stream": "A.src.out"}, 403),  # reads it, no more
        ("C", read_input, 404),
        ("D", append_output, 404),
        ("B", retire, 403),  # not committed yet
        ("admin", append_output, 403),  # the operator reads, nothing else
        ("B", {"operations": ["read"], "stream": "nothing.out"}, 404),
        ("B", {"operations": ["release"], "task": "A.x"}, 422),  # which movement?
        ("B", {"operations": ["read"], "stream": "A.src.out", "consumer": "A.x"}, 422),
    ]
    for who, body, status in refusals:
        got, answer = ask(api, who, **body)
        assert got == status, (who, body, answer)
        assert answer["detail"]
    assert registry_snapshot(db_url) == before, "a refused token request wrote"

    for who, body, serving in [
        ("B", release, "A"),
        ("A", ship, "B"),
        ("B", ship, "B"),
        ("B", read_input, "A"),  # about to run A.x
        ("B", ack_input, "A"),
        ("B", append_output, "A"),  # takes over A.x's writes at the commit
        ("A", append_output, "A"),  # the owner keeps the log
        ("admin", {"operations": ["read"], "stream": "A.x.out"}, "A"),
    ]:
        got, answer = ask(api, who, **body)
        assert (got, answer.get("serving")) == (200, serving), (who, body, answer)

    epoch = api.get("B", f"/v1/movements/{movement}").json()["epoch"]
    assert api.post("B", f"/v1/movements/{movement}/commit", {"epoch": epoch}).status_code == 200
    assert ask(api, "B", **release)[0] == 403  # committed: nothing left to release
    assert ask(api, "A", **ack_input)[0] == 403  # A owns A.x but no longer runs it
    got, answer = ask(api, "B", **retire)
    assert (got, answer["serving"]) == (200, "A")


def test_a_source_running_at_a_partner_is_served_there_and_readers_are_told_so(
    moving: tuple[Api, int],
) -> None:
    """A sells its source A.src to its partner C: from the commit its publisher writes on C's
    endpoint, so C serves A.src.out (tokens name C, and A.x's record says where its input is),
    while A.x's own output stays at its owner A."""
    api, movement = moving
    commit(api, "B", movement)  # A.x runs at B from now on (one move in flight at a time)
    commit(api, "C", sell(api, "A.src", "C"))

    for who, body in [
        ("C", {"operations": ["append", "fence"], "stream": "A.src.out"}),  # its publisher
        ("A", {"operations": ["read"], "stream": "A.src.out"}),  # A.x's owner reads it there
        ("B", {"operations": ["ack"], "stream": "A.src.out", "consumer": "A.x"}),  # its host
        ("admin", {"operations": ["read"], "stream": "A.src.out"}),
    ]:
        got, answer = ask(api, who, **body)
        assert (got, answer.get("serving")) == (200, "C"), (who, body, answer)
    got, answer = ask(api, "A", operations=["append"], stream="A.x.out")
    assert (got, answer.get("serving")) == (200, "A")
    inputs = api.get("A", "/v1/tasks/A.x").json()["inputs"]
    assert inputs == [
        {
            "task": "A.src",
            "fragment": "generator",
            "schema": "src_ip STRING, dst_ip STRING, dst_port INT, stime TIMESTAMP",
            "event_time": "stime",
            "served_by": "C",
            "active_copies": [],
        }
    ]


def test_an_issued_token_verifies_with_the_published_key(moving: tuple[Api, int]) -> None:
    api, movement = moving
    keys = [load_public_key(k) for k in api.get("D", "/v1/dataplane/key").json()["public_keys"]]
    got, answer = ask(api, "B", operations=["release"], task="A.x", movement=movement)
    assert got == 200
    claims = verify(answer["token"], keys, audience="A", now=time.time())
    assert (claims.subject, claims.audience) == ("B", "A")
    assert claims.grant == Grant(frozenset({"release"}), task="A.x", movement=movement)
    assert claims.expires_at - claims.issued_at == pytest.approx(300, abs=1)


def test_standby_tokens_go_to_the_one_replica_holder_and_runners_keep_positions_as_the_consumer(
    api: Api, db_url: str
) -> None:
    """A hosts A.x; C or D holds its passive standby (their contracts allow hosting, B's does
    not); then both do."""
    for name in ("A", "B", "C", "D"):
        api.register(name)
    for partner, hosting in (("B", False), ("C", True), ("D", True)):
        made = api.propose("A", partner, availability={"replica_hosting": hosting})
        assert api.post(partner, f"/v1/contracts/{made['id']}/accept", {"version": 1}).is_success
    for body in (
        {"name": "A.src", "load": 1.0, "fragment": "generator"},
        {
            "name": "A.x",
            "load": 5.0,
            "fragment": "connections_per_source",
            "inputs": [{"task": "A.src"}],
        },
    ):
        assert api.post("A", "/v1/tasks", body).status_code == 201, body
    placed = api.post("A", "/v1/tasks/A.x/replicas", {"k": 1, "technique": "passive_standby"})
    assert placed.status_code == 201, placed.text
    holder = placed.json()[0]["host"]
    standby = {"operations": ["standby"], "task": "A.x"}

    before = registry_snapshot(db_url)
    for who, body, status in [
        (holder, standby, 403),  # the holder receives standbys, it does not ship them
        ("B", standby, 404),  # no part in A.x
        ("A", {**standby, "movement": 1}, 422),  # a standby is under no movement
        ("A", {"operations": ["standby", "checkpoint"], "task": "A.x", "movement": 1}, 422),
        ("A", {"operations": ["ack"], "stream": "A.src.out", "consumer": "A.xy"}, 403),
        ("B", {"operations": ["ack"], "stream": "A.src.out", "consumer": "A.x.backup"}, 404),
    ]:
        got, answer = ask(api, who, **body)
        assert got == status, (who, body, answer)
    assert registry_snapshot(db_url) == before, "a refused token request wrote"

    got, answer = ask(api, "A", **standby)
    assert (got, answer.get("serving")) == (200, holder), answer
    for who, consumer in (("A", "A.x.warm-7"), ("A", "A.x.standby"), (holder, "A.x.backup")):
        body = {"operations": ["ack"], "stream": "A.src.out", "consumer": consumer}
        got, answer = ask(api, who, **body)
        assert (got, answer.get("serving")) == (200, "A"), (who, consumer, answer)

    # The holder reads the output it would take the writes of over at a failover.
    got, answer = ask(api, holder, operations=["read"], stream="A.x.out")
    assert (got, answer.get("serving")) == (200, "A"), answer
    assert ask(api, "B", operations=["read"], stream="A.x.out")[0] == 404
    assert ask(api, holder, operations=["append"], stream="A.x.out")[0] == 403

    # A second holder: the host could no longer say which one a standby token is for.
    assert api.post(
        "A", "/v1/tasks/A.x/replicas", {"k": 2, "technique": "passive_standby"}
    ).is_success
    assert ask(api, "A", **standby)[0] == 403


def _active_replica_on_c(api: Api) -> None:
    """A owns and hosts A.x (fed by A.src); C, A's replica-hosting partner, holds its active
    replica; B is A's partner without replica hosting."""
    for name in ("A", "B", "C"):
        api.register(name)
    for partner, hosting in (("B", False), ("C", True)):
        made = api.propose("A", partner, availability={"replica_hosting": hosting})
        assert api.post(partner, f"/v1/contracts/{made['id']}/accept", {"version": 1}).is_success
    for body in (
        {"name": "A.src", "load": 1.0, "fragment": "generator"},
        {
            "name": "A.x",
            "load": 5.0,
            "fragment": "connections_per_source",
            "inputs": [{"task": "A.src"}],
        },
    ):
        assert api.post("A", "/v1/tasks", body).status_code == 201, body
    placed = api.post("A", "/v1/tasks/A.x/replicas", {"k": 1, "technique": "active_standby"})
    assert placed.status_code == 201, placed.text
    assert placed.json()[0]["host"] == "C"


def test_an_active_replicas_own_log_is_served_and_written_by_its_holder_alone(
    api: Api, db_url: str
) -> None:
    """A hosts A.x; C holds its active replica, which keeps its own log A.x.out@C (and the DPC
    companion A.x.out@C.dpc) on C's endpoint. Whoever reads A.x.out reads it; only C writes it;
    a name for a participant that holds no replica is unknown."""
    _active_replica_on_c(api)
    before = registry_snapshot(db_url)
    for who, body, status in [
        ("A", {"operations": ["append"], "stream": "A.x.out@C"}, 403),  # C's log, C's writes
        ("B", {"operations": ["read"], "stream": "A.x.out@C"}, 404),  # no party to A.x
        ("A", {"operations": ["read"], "stream": "A.x.out@B"}, 404),  # B holds no replica
        ("C", {"operations": ["read"], "stream": "B.x.out@C"}, 404),  # no such task
        ("A", {"operations": ["read"], "stream": "A.x.out@"}, 404),
        ("admin", {"operations": ["append"], "stream": "A.x.out@C"}, 403),
        ("admin", {"operations": ["read"], "stream": "A.x.out@B"}, 404),
    ]:
        got, answer = ask(api, who, **body)
        assert got == status, (who, body, answer)
        assert answer["detail"]
    assert registry_snapshot(db_url) == before, "a refused token request wrote"

    for who, body in [
        ("C", {"operations": ["append", "fence"], "stream": "A.x.out@C"}),
        ("C", {"operations": ["append"], "stream": "A.x.out@C.dpc"}),
        ("A", {"operations": ["read"], "stream": "A.x.out@C"}),
        ("A", {"operations": ["read"], "stream": "A.x.out@C.dpc"}),
        ("admin", {"operations": ["read"], "stream": "A.x.out@C"}),
    ]:
        got, answer = ask(api, who, **body)
        assert (got, answer.get("serving")) == (200, "C"), (who, body, answer)
    # Its inputs: the copy reads and acknowledges as A.x.active, a position of its own.
    body = {"operations": ["read", "ack"], "stream": "A.src.out", "consumer": "A.x.active"}
    got, answer = ask(api, "C", **body)
    assert (got, answer.get("serving")) == (200, "A"), answer


def test_a_holder_promoted_by_a_failover_still_writes_its_copys_log(api: Api, db_url: str) -> None:
    """A fails and C's active copy takes A.x over (spark_jobs.runtime.promote): it runs on as
    the host and still writes A.x.out@C, which it forwards into A.x.out, so C still gets those
    tokens though it holds no replica any more; nobody else gains a right."""
    _active_replica_on_c(api)
    with unit_of_work(db_url) as session:
        session.query(Participant).filter_by(name="A").one().last_heartbeat_at = (
            utcnow() - timedelta(hours=1)
        )
    with unit_of_work(db_url) as session:
        failures.sweep(session, checked_until=utcnow(), interval_seconds=60, misses=3)
    made = api.post("C", "/v1/movements", {"task": "A.x", "to": "C", "reason": "failover"})
    assert made.status_code == 201, made.text
    movement = made.json()
    committed = api.post(
        "C", f"/v1/movements/{movement['id']}/commit", {"epoch": movement["epoch"]}
    )
    assert committed.status_code == 200, committed.text
    assert api.get("C", "/v1/replicas").json() == []  # promoted: no replica record left

    for who, body in [
        ("C", {"operations": ["append", "fence"], "stream": "A.x.out@C"}),
        ("C", {"operations": ["append"], "stream": "A.x.out@C.dpc"}),
        ("C", {"operations": ["append"], "stream": "A.x.out"}),
        ("admin", {"operations": ["read"], "stream": "A.x.out@C"}),
    ]:
        got, answer = ask(api, who, **body)
        assert (got, answer.get("serving")) == (200, "C" if "@" in body["stream"] else "A"), (
            who,
            body,
            answer,
        )
    before = registry_snapshot(db_url)
    for who, body, status in [
        ("B", {"operations": ["read"], "stream": "A.x.out@C"}, 404),  # still no party to A.x
        ("A", {"operations": ["append"], "stream": "A.x.out@C"}, 403),  # still C's writes
        ("C", {"operations": ["read"], "stream": "A.x.out@B"}, 404),
    ]:
        got, answer = ask(api, who, **body)
        assert got == status, (who, body, answer)
    assert registry_snapshot(db_url) == before


def test_a_consumer_learns_its_inputs_active_copies_and_may_read_their_logs(
    api: Api, db_url: str
) -> None:
    """A.s (prefix scanners) reads A.p (port scanners), whose active replica C holds: A.s's
    record names C among its input's active copies, and A.s's host may read C's log of A.p's
    output (the alternate it reads a bucket from when A's log lacks it). A passive standby
    keeps no log of its own, so it is no active copy."""
    _active_replica_on_c(api)
    for body in (
        {
            "name": "A.p",
            "load": 1.0,
            "fragment": "distinct_ports_per_source",
            "inputs": [{"task": "A.src"}],
        },
        {"name": "A.s", "load": 1.0, "fragment": "prefix_scanners", "inputs": [{"task": "A.p"}]},
    ):
        assert api.post("A", "/v1/tasks", body).status_code == 201, body
    standby = api.post("A", "/v1/tasks/A.p/replicas", {"k": 1, "technique": "passive_standby"})
    assert standby.status_code == 201, standby.text
    inputs = api.get("A", "/v1/tasks/A.s").json()["inputs"]
    assert inputs == [
        {
            "task": "A.p",
            "fragment": "distinct_ports_per_source",
            "schema": "stime TIMESTAMP, window_start TIMESTAMP, src_ip STRING, ports INT",
            "event_time": "stime",
            "served_by": "A",
            "active_copies": [],
        }
    ]
    # The standby's record goes, an active replica comes on the same holder.
    with unit_of_work(db_url) as session:
        session.execute(text("DELETE FROM replicas"))
    active = api.post("A", "/v1/tasks/A.p/replicas", {"k": 1, "technique": "active_standby"})
    assert active.status_code == 201, active.text
    (entry,) = api.get("A", "/v1/tasks/A.s").json()["inputs"]
    assert entry["active_copies"] == ["C"]
    got, answer = ask(api, "A", operations=["read"], stream="A.p.out@C")
    assert (got, answer.get("serving")) == (200, "C"), answer
    # The input's own record (A.p reads a source) names none.
    (source,) = api.get("A", "/v1/tasks/A.p").json()["inputs"]
    assert source["active_copies"] == []
