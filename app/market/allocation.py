"""The simulator's former acceptability check, kept as a thin view of ``app.market.acceptability``.

``Standing`` and ``check_allocation`` keep their signatures for callers that still import them
(the live demo); they judge with ``acceptability.judge_allocation``, the one rule, without the
contract graph. New code calls ``judge_allocation`` with ``Position`` and the contracts, which
also explains an unacceptable allocation by the contract paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.market.acceptability import Position, judge_allocation
from app.market.cost_models import CostModel


@dataclass(frozen=True)
class Standing:
    """One participant's position against its threshold."""

    name: str
    model: CostModel
    load: float
    threshold: float
    price: float
    smallest_task: float | None  # the smallest task it hosts; None when it hosts nothing

    def position(self) -> Position:
        return Position(
            name=self.name,
            load=self.load,
            threshold=self.threshold,
            smallest_task=self.smallest_task,
            model=self.model,
            price=self.price,
        )


@dataclass(frozen=True)
class Verdict:
    acceptable: bool
    overloaded: bool  # total load exceeds the total of the thresholds
    offenders: tuple[str, ...]
    reasons: tuple[str, ...]


def check_allocation(standings: Sequence[Standing], *, delta: float) -> Verdict:
    """The verdict on an allocation, naming each participant that makes it unacceptable."""
    judged = judge_allocation([s.position() for s in standings], delta=delta)
    return Verdict(judged.acceptable, judged.overloaded, judged.offenders, judged.reasons)
