"""The participant node's market decisions against an in-memory registry (no service, no Spark):
move-back after the minimum duration, both sides' reservation prices, the fragments it accepts."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from app.participant.bpm_decisions import BpmDecisions
from app.participant.client import ApiError
from app.participant.node import Agent
from app.participant.ports import MovementRecord, NoHost, Received

ONLINE = {"O": "online", "T": "online", "B": "online"}


@dataclass
class MemoryRegistry:
    """What one participant sees of the registry; records what it is asked to do."""

    me: str
    tasks_: list[dict[str, Any]] = field(default_factory=list)
    contracts_: list[dict[str, Any]] = field(default_factory=list)
    offers_: list[dict[str, Any]] = field(default_factory=list)
    made: list[dict[str, Any]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    refuse_reservation: bool = False
    ids: itertools.count = field(default_factory=lambda: itertools.count(100))

    def heartbeat(self, **report: Any) -> dict[str, Any]:
        return {"name": self.me, **report}

    def contracts(self, status: str | None = None) -> list[dict[str, Any]]:
        return self.contracts_

    def tasks(self) -> list[dict[str, Any]]:
        return self.tasks_

    def task(self, name: str) -> dict[str, Any]:
        for t in self.tasks_:
            if t["name"] == name:
                return t
        raise ApiError(404, f"task {name!r} not found", "name")

    def replicas(self) -> list[dict[str, Any]]:
        return []

    def offers(self, status: str | None = None) -> list[dict[str, Any]]:
        return self.offers_

    def offer(self, contract_id, tasks, price, loads=None, relay_for=None, replicas=None,
              reservation_price=None) -> dict[str, Any]:  # fmt: skip
        made = {"id": next(self.ids), "contract_id": contract_id, "tasks": tasks, "price": price,
                "reservation_price": reservation_price}  # fmt: skip
        self.made.append(made)
        return made

    def accept(self, offer_id, version, tasks=None, replicas=None, reservation_price=None):
        if self.refuse_reservation:
            raise ApiError(409, "no price suits both sides", "reservation_price")
        self.accepted.append({"offer": offer_id, "tasks": tasks, "reservation": reservation_price})
        return {"movement_ids": []}

    def reject(self, offer_id: int, version: int) -> dict[str, Any]:
        self.rejected.append(offer_id)
        return {}

    def movement(self, movement_id: int) -> dict[str, Any]:
        raise AssertionError("no movement in these tests")


class NoMoves:
    def receive(self, movement: MovementRecord) -> Received:
        raise AssertionError("nothing moves in these tests")

    receive_replica = receive


def task(name: str, owner: str, host: str, load: float, **extra: Any) -> dict[str, Any]:
    row = {"name": name, "owner": owner, "host": host, "load": load, "pinned": False,
           "lease_epoch": 1, "contract_id": None, "price": None, "fragment": None,
           "params": {}, "inputs": [], "host_since": datetime.now(UTC).isoformat()}  # fmt: skip
    row.update(extra)
    return row


def contract(cid: int, a: str, b: str, lo: float = 0.24, hi: float = 0.26, min_move: float = 10):
    return {"id": cid, "proposer": a, "partner": b, "price_min": lo, "price_max": hi,
            "min_move_seconds": min_move, "availability": None}  # fmt: skip


def node(registry: MemoryRegistry, **options: Any) -> Agent:
    decisions = BpmDecisions.for_model({"kind": "mm1"}, 100.0, 0.005)
    return Agent(registry.me, registry, decisions, NoHost(), NoMoves(), offer_interval=1.0,
                 **options)  # fmt: skip


def loaded_host_of(held_for: float) -> MemoryRegistry:
    """T runs O's task O.x at 0.245 under their contract (min move 10 s), held ``held_for``
    seconds, and its own pinned load pushes its marginal cost past that price."""
    since = (datetime.now(UTC) - timedelta(seconds=held_for)).isoformat()
    return MemoryRegistry(
        "T",
        tasks_=[
            task("O.x", "O", "T", 6.0, contract_id=1, price=0.245, host_since=since),
            task("T.base", "T", "T", 80.0, pinned=True),
        ],
        contracts_=[contract(1, "O", "T")],
    )


def test_a_loaded_host_returns_a_task_to_its_owner_at_the_price_in_force_after_min_move() -> None:
    registry = loaded_host_of(held_for=30)
    node(registry).tick(5.0, liveness=ONLINE)
    assert [(m["contract_id"], m["tasks"], m["price"]) for m in registry.made] == [
        (1, ["O.x"], 0.245)
    ]


def test_no_move_back_before_the_minimum_move_duration() -> None:
    registry = loaded_host_of(held_for=3)
    node(registry).tick(5.0, liveness=ONLINE)
    # Shedding by the ordinary rule is allowed, but not the move-back at the price in force.
    assert all(m["price"] != 0.245 for m in registry.made), registry.made


def test_no_move_back_when_keeping_the_task_pays() -> None:
    registry = loaded_host_of(held_for=30)
    registry.tasks_[1]["load"] = 10.0  # T has plenty of room: 0.245 pays more than O.x costs
    node(registry).tick(5.0, liveness=ONLINE)
    assert registry.made == []


def overloaded_giver() -> MemoryRegistry:
    return MemoryRegistry(
        "O",
        tasks_=[task(f"O.q{i}", "O", "O", 10.0) for i in range(10)],
        contracts_=[contract(1, "O", "B")],
    )


def test_an_offer_carries_the_givers_reservation_within_the_range() -> None:
    registry = overloaded_giver()
    node(registry).tick(5.0, liveness=ONLINE)
    (made,) = registry.made
    assert 0.24 <= made["price"] <= made["reservation_price"] <= 0.26


def open_offer(names: list[str], price: float = 0.25) -> dict[str, Any]:
    return {"id": 7, "version": 1, "from": "O", "to": "B", "status": "open", "tasks": names,
            "replicas": [], "loads": dict.fromkeys(names, 5.0), "price": price}  # fmt: skip


def test_an_acceptance_carries_the_takers_reservation_below_the_price() -> None:
    registry = MemoryRegistry("B", offers_=[open_offer(["O.q1", "O.q2"])])
    node(registry).tick(0.0, liveness=ONLINE)
    (accepted,) = registry.accepted
    assert accepted["tasks"] == ["O.q1", "O.q2"]
    assert 0 < accepted["reservation"] < 0.25


def test_no_price_for_both_sides_declines_the_offer() -> None:
    registry = MemoryRegistry("B", offers_=[open_offer(["O.q1"])], refuse_reservation=True)
    node(registry).tick(0.0, liveness=ONLINE)
    assert registry.accepted == [] and registry.rejected == [7]


def test_a_participant_takes_only_the_fragments_it_accepts() -> None:
    registry = MemoryRegistry(
        "B",
        tasks_=[
            task("O.q1", "O", "O", 5.0, fragment="connections_per_source"),
            task("O.q2", "O", "O", 5.0, fragment="prefix_scanners"),
            task("O.q3", "O", "O", 5.0),
        ],
        offers_=[open_offer(["O.q1", "O.q2", "O.q3"])],
    )
    node(registry, accept_fragments={"connections_per_source"}).tick(0.0, liveness=ONLINE)
    (accepted,) = registry.accepted
    assert sorted(accepted["tasks"]) == ["O.q1", "O.q3"]  # declared load is always welcome


def test_a_move_back_returns_every_task_of_the_owner_that_pays_in_one_offer() -> None:
    """T is far past its threshold with three of O's tasks due: it gives back as many as its
    saving beats the price for, together, rather than one per offer interval."""
    since = (datetime.now(UTC) - timedelta(seconds=60)).isoformat()
    registry = MemoryRegistry(
        "T",
        tasks_=[
            *(
                task(f"O.q{i}", "O", "T", 5.0, contract_id=1, price=0.245, host_since=since)
                for i in range(3)
            ),
            task("T.base", "T", "T", 78.0, pinned=True),
        ],
        contracts_=[contract(1, "O", "T")],
    )
    node(registry).tick(5.0, liveness=ONLINE)
    (made,) = registry.made
    assert (made["contract_id"], made["price"]) == (1, 0.245)
    assert sorted(made["tasks"]) == ["O.q0", "O.q1", "O.q2"]
    # With a little load only, returning all three would cost T more than they pay: fewer go.
    registry.tasks_[-1]["load"] = 68.0
    registry.made.clear()
    node(registry).tick(5.0, liveness=ONLINE)
    (made,) = registry.made
    assert 1 <= len(made["tasks"]) < 3


def test_after_a_partner_refuses_a_whole_offer_it_is_offered_only_smaller_tasks() -> None:
    # O sheds its 20-unit task first; T has no room for it and refuses the whole offer. Once the
    # refusal back-off has passed, O offers T only tasks smaller than that (the 5-unit one),
    # instead of the same 20 units every time (seen in generated federations: a giver cycling
    # one large task through partners that each had room for its smaller ones).
    registry = MemoryRegistry(
        "O",
        tasks_=[
            task("O.big", "O", "O", 20.0),
            task("O.small", "O", "O", 5.0),
            task("O.base", "O", "O", 72.0, pinned=True),
        ],
        contracts_=[contract(1, "O", "T")],
    )
    agent = node(registry)
    agent.tick(1.0, liveness=ONLINE)
    assert [m["tasks"] for m in registry.made] == [["O.big"]]
    first = registry.made[0]
    registry.offers_ = [{"id": first["id"], "from": "O", "to": "T", "status": "rejected",
                         "tasks": ["O.big"], "loads": {"O.big": 20.0}, "version": 2}]  # fmt: skip
    agent.tick(2.0, liveness=ONLINE)  # T sits out the back-off
    agent.tick(6.0, liveness=ONLINE)
    assert [m["tasks"] for m in registry.made] == [["O.big"], ["O.small"]]


def offer_of(
    giver: str,
    taker: str,
    offer_id: int,
    names: list[str],
    load: float,
    status: str,
    price: float = 0.25,
) -> dict[str, Any]:
    accepted = names if status in ("accepted", "partially_accepted") else []
    return {"id": offer_id, "version": 1, "from": giver, "to": taker, "status": status,
            "tasks": names, "replicas": [], "loads": dict.fromkeys(names, load), "price": price,
            "accepted_tasks": accepted, "accepted_replicas": []}  # fmt: skip


def relaying_host() -> MemoryRegistry:
    """C (threshold ~80) holds B.q01 (20) and its own pinned 60, and has a contract to D: B's
    offer of B.q02 (20) does not fit, so C offers B.q01 on to D first (a relay)."""
    return MemoryRegistry(
        "C",
        tasks_=[
            task("C.base", "C", "C", 60.0, pinned=True),
            task("B.q01", "B", "C", 20.0, contract_id=1, price=0.25),
        ],
        contracts_=[contract(1, "B", "C"), contract(2, "C", "D")],
        offers_=[offer_of("B", "C", 7, ["B.q02"], 20.0, "open")],
    )


def test_the_room_a_relay_made_is_used_before_its_moves_commit() -> None:
    """D accepted C's relay of B.q01 between C's reading of its tasks and of its offers: the
    tick's task list still has B.q01 at C (its movement only prepared). C takes B's offer on the
    load it has once B.q01 has left, instead of refusing it for room it has just made."""
    registry = relaying_host()
    agent = node(registry)
    agent.tick(0.0, liveness={"B": "online", "D": "online"})
    (relay,) = registry.made
    assert relay["tasks"] == ["B.q01"] and registry.accepted == [] and registry.rejected == []
    registry.offers_.append(offer_of("C", "D", relay["id"], ["B.q01"], 20.0, "accepted"))
    agent.tick(1.0, liveness={"B": "online", "D": "online"})
    assert [a["tasks"] for a in registry.accepted] == [["B.q02"]]
    assert registry.rejected == []


def test_a_relay_refused_downstream_leaves_the_upstream_offer_refused() -> None:
    registry = relaying_host()
    agent = node(registry)
    agent.tick(0.0, liveness={"B": "online", "D": "online"})
    (relay,) = registry.made
    registry.offers_.append(offer_of("C", "D", relay["id"], ["B.q01"], 20.0, "rejected"))
    agent.tick(1.0, liveness={"B": "online", "D": "online"})
    assert registry.accepted == [] and registry.rejected == [7]
