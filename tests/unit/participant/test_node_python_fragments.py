"""A giver's node offers a python fragment elsewhere once the registry refused it to a partner
that does not run its distribution (app.market.runnable)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.market.runnable import may_run, python_distribution, refused_task
from app.participant.client import ApiError
from tests.unit.participant.test_node import ONLINE, MemoryRegistry, contract, node, task

HOT = {"python": "netmon.fragments:hot", "distribution": "netmon-fragments"}


@dataclass
class RefusingPython(MemoryRegistry):
    """Refuses, as the registry does, any offer of O.hot over contract 1 (to B)."""

    def offer(self, contract_id, tasks, price, loads=None, relay_for=None, replicas=None,
              reservation_price=None) -> dict[str, Any]:  # fmt: skip
        if contract_id == 1 and "O.hot" in tasks:
            field = f"tasks[{tasks.index('O.hot')}]"
            raise ApiError(422, "B does not run Python fragments from netmon-fragments", field)
        return super().offer(contract_id, tasks, price, loads, relay_for, replicas,
                             reservation_price)  # fmt: skip


def test_a_refused_python_fragment_is_left_out_of_the_next_offer_to_that_partner() -> None:
    registry = RefusingPython(
        "O",
        tasks_=[
            task("O.hot", "O", "O", 30.0, work=HOT),
            *(task(f"O.q{i}", "O", "O", 10.0) for i in range(7)),
        ],
        contracts_=[contract(1, "O", "B")],
    )
    agent = node(registry)
    agent.tick(5.0, liveness=ONLINE)
    assert registry.made == []
    assert agent.state.cannot_run == {"B": {"O.hot": 5.0}}
    agent.tick(6.0, liveness=ONLINE)
    (made,) = registry.made
    assert made["contract_id"] == 1
    assert made["tasks"] and "O.hot" not in made["tasks"]


def test_the_rule_compares_distributions_as_packaging_does() -> None:
    assert python_distribution(HOT) == "netmon-fragments"
    assert python_distribution({"sql": "SELECT 1"}) is None
    assert may_run("netmon-fragments", ["Netmon_Fragments"]) is True
    assert may_run("netmon-fragments", None) is False
    assert may_run(None, None) is True
    assert refused_task("tasks[1]", ["a", "b"], []) == "b"
    assert refused_task("replicas[0]", ["a"], ["r"]) == "r"
    assert refused_task("price", ["a"], []) is None
