"""Choosing which replica of an upstream fragment to read from (Borealis SIGMOD 2005, 4.3).

A consumer prefers a STABLE replica, then one in UP_FAILURE (tentative but fresh), then one in
STABILIZATION (reconciling, may stall); unreachable replicas are never chosen. It keeps its
current replica unless another one is strictly better: a switch costs a resynchronisation, and
after a partition heals the consumer has no reason to go back (the demo's "stays with R").
Each switch starts a new version of the consumer's input (the poster's "same name, different
version"), so a report can tell which rows came through which replica.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from app.availability.states import NodeState

_RANK = {NodeState.STABLE: 0, NodeState.UP_FAILURE: 1, NodeState.STABILIZATION: 2}


def rank(state: NodeState) -> int:
    return _RANK[state]


@dataclass(frozen=True)
class ReplicaView:
    name: str
    state: NodeState | None
    reachable: bool


@dataclass(frozen=True)
class Switch:
    stream: str
    from_replica: str | None
    to_replica: str
    at: float
    version: int


@dataclass
class UpstreamSelector:
    stream: str
    # The order replicas are listed in breaks ties before any is chosen (the primary first).
    replicas: tuple[str, ...]
    current: str | None = None
    version: int = 0
    switches: list[Switch] = field(default_factory=list)

    def best(self, views: Iterable[ReplicaView]) -> str | None:
        usable = [v for v in views if v.reachable and v.state is not None]
        if not usable:
            return None
        order = {name: i for i, name in enumerate(self.replicas)}
        usable.sort(key=lambda v: (rank(v.state) if v.state else 9, order.get(v.name, 99)))
        top = rank(usable[0].state) if usable[0].state else 9
        for view in usable:
            if view.name == self.current and view.state is not None and rank(view.state) == top:
                return self.current
        return usable[0].name

    def decide(self, views: Iterable[ReplicaView], now: float) -> Switch | None:
        """A switch to make now, or None to stay (also None when nothing is reachable)."""
        choice = self.best(views)
        if choice is None or choice == self.current:
            return None
        self.version += 1
        switch = Switch(self.stream, self.current, choice, now, self.version)
        self.current = choice
        self.switches.append(switch)
        return switch
