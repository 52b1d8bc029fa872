"""Deterministic discrete-time simulation of a federation under the Bounded-Price Mechanism.

INTERFACE (imported by the what-if Spark job): ``simulate(doc, max_steps=...)`` returning a frozen
``SimulationResult`` whose ``summary()`` is the JSON of ``summary.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.federation.document import FederationDoc


@dataclass(frozen=True)
class StepRecord:
    t: float
    loads: dict[str, float]
    marginal_costs: dict[str, float]
    acceptable: bool
    overloaded: bool = False
    offers: int = 0
    moves: int = 0


@dataclass(frozen=True)
class MoveRecord:
    task: str
    source: str
    target: str
    reason: str  # offer | relay | move_back | leave
    at: float
    price: float
    load: float = 0.0
    giver_mc: float = 0.0
    taker_mc: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "from": self.source,
            "to": self.target,
            "reason": self.reason,
            "at": self.at,
            "price": self.price,
            "load": self.load,
        }


@dataclass(frozen=True)
class SimulationResult:
    acceptable: bool
    steps_to_acceptable: int | None
    seconds_to_acceptable: float | None
    moves: int
    payments_total: float
    cost: float
    cost_lower_bound: float
    final_load: dict[str, float]
    thresholds: dict[str, float]
    trace: list[StepRecord] = field(default_factory=list)
    move_log: list[MoveRecord] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "acceptable": self.acceptable,
            "steps_to_acceptable": self.steps_to_acceptable,
            "seconds_to_acceptable": self.seconds_to_acceptable,
            "moves": self.moves,
            "payments_total": self.payments_total,
            "cost": self.cost,
            "cost_lower_bound": self.cost_lower_bound,
            "final_load": dict(self.final_load),
            "thresholds": dict(self.thresholds),
        }


def simulate(doc: FederationDoc, *, max_steps: int | None = None) -> SimulationResult:
    """Stub while the engine is written: no moves, the initial allocation reported as final."""
    loads: dict[str, float] = {p.name: 0.0 for p in doc.participants}
    for task in doc.tasks:
        loads[task.initial_host] += task.load
    return SimulationResult(
        acceptable=False,
        steps_to_acceptable=None,
        seconds_to_acceptable=None,
        moves=0,
        payments_total=0.0,
        cost=0.0,
        cost_lower_bound=0.0,
        final_load=loads,
        thresholds={p.name: 0.8 * p.capacity for p in doc.participants},
        trace=[StepRecord(t=0.0, loads=dict(loads), marginal_costs={}, acceptable=False)],
        move_log=[],
    )
