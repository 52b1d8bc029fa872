"""The agent's side of Python fragments without Spark: ``--fragments`` (or FEDLOAD_FRAGMENTS)
is what its node advertises in heartbeats, and offered Python tasks from any other
distribution are left out of what it accepts."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from app.participant.command import _distributions
from app.work.distributions import FRAGMENTS_ENV
from tests.unit.participant.test_node import ONLINE, MemoryRegistry, node, open_offer, task


def python_task(name: str, distribution: str) -> dict[str, Any]:
    work = {"python": "pkg.mod:f", "distribution": distribution, "distribution_version": "1"}
    return task(name, "O", "O", 5.0, work=work)


class Beats(MemoryRegistry):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.beats: list[dict[str, Any]] = []

    def heartbeat(self, **report: Any) -> dict[str, Any]:
        self.beats.append(report)
        return super().heartbeat(**report)


def test_the_node_advertises_what_it_allows_and_fedload_always():
    registry = Beats("B")
    node(registry, fragments={"Netmon_Fragments"}).tick(0.0, liveness=ONLINE)
    assert registry.beats[0]["fragments"] == ["fedload", "netmon-fragments"]


def test_a_node_given_no_fragments_says_nothing_of_them():
    registry = Beats("B")
    node(registry).tick(0.0, liveness=ONLINE)
    assert "fragments" not in registry.beats[0]


def test_offered_python_tasks_of_other_distributions_are_left_out():
    registry = MemoryRegistry(
        "B",
        tasks_=[
            python_task("O.mine", "netmon-fragments"),
            python_task("O.theirs", "other-dist"),
            python_task("O.own", "fedload"),
            task("O.sql", "O", "O", 5.0, work={"sql": "SELECT * FROM r"}),
        ],
        offers_=[open_offer(["O.mine", "O.theirs", "O.own", "O.sql"])],
    )
    node(registry, fragments=["netmon_fragments"]).tick(0.0, liveness=ONLINE)
    (accepted,) = registry.accepted
    assert sorted(accepted["tasks"]) == ["O.mine", "O.own", "O.sql"]


def test_the_option_takes_repeats_and_comma_lists_else_the_environment(monkeypatch):
    monkeypatch.setenv(FRAGMENTS_ENV, "from-env")
    assert _distributions(["a", "b,c"]) == frozenset({"fedload", "a", "b", "c"})
    assert _distributions([]) == frozenset({"fedload", "from-env"})
    monkeypatch.delenv(FRAGMENTS_ENV)
    assert _distributions([]) == frozenset({"fedload"})
    with pytest.raises(typer.BadParameter):
        _distributions(["not a name"])
