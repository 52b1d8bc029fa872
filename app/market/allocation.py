"""Is an allocation acceptable? (DESIGN.md, "Acceptable allocation"; Balazinska et al. 2004.)

Every participant is below its capacity threshold, or, when the total offered load exceeds the
total of the thresholds, every participant is at or above its threshold.

Tasks are indivisible, so "below" and "above" are measured at task granularity and with the
hysteresis band, the same tolerance the mechanism itself moves with:

- a participant is *over* its threshold when its load exceeds it and removing its smallest
  hosted task would still save more than ``price + delta`` per unit (it has load it should shed);
- a participant is *under* its threshold when its load is below it and taking the federation's
  smallest task would keep its marginal cost below ``price - delta`` (it has room to take load).

``price`` is the participant's threshold price (its contracts' mean midpoint).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.market.cost_models import CostModel, marginal_cost


@dataclass(frozen=True)
class Standing:
    """One participant's position against its threshold."""

    name: str
    model: CostModel
    load: float
    threshold: float
    price: float
    smallest_task: float | None  # the smallest task it hosts; None when it hosts nothing


@dataclass(frozen=True)
class Verdict:
    acceptable: bool
    overloaded: bool  # total load exceeds the total of the thresholds
    offenders: tuple[str, ...]
    reasons: tuple[str, ...]


def is_over(s: Standing, delta: float) -> bool:
    if s.load <= s.threshold or s.smallest_task is None:
        return False
    return marginal_cost(s.model, s.load, -s.smallest_task) > s.price + delta


def is_under(s: Standing, smallest_task: float, delta: float) -> bool:
    if s.load >= s.threshold:
        return False
    return s.model.derivative(s.load + smallest_task) < s.price - delta


def check_allocation(standings: Sequence[Standing], *, delta: float) -> Verdict:
    """The verdict on an allocation, naming each participant that makes it unacceptable."""
    total_load = math.fsum(s.load for s in standings)
    total_threshold = math.fsum(s.threshold for s in standings)
    overloaded = total_load > total_threshold
    if not overloaded:
        bad = [s for s in standings if is_over(s, delta)]
        reasons = [
            f"{s.name} carries {s.load:.6g}, above its threshold {s.threshold:.6g} by more "
            f"than its smallest task ({s.smallest_task:.6g}) in a federation with spare capacity"
            for s in bad
        ]
    else:
        sizes = [s.smallest_task for s in standings if s.smallest_task is not None]
        smallest = min(sizes) if sizes else 0.0
        bad = [s for s in standings if is_under(s, smallest, delta)]
        reasons = [
            f"{s.name} carries {s.load:.6g}, below its threshold {s.threshold:.6g} with room "
            f"for a task of {smallest:.6g} while the federation is overloaded"
            for s in bad
        ]
    return Verdict(
        acceptable=not bad,
        overloaded=overloaded,
        offenders=tuple(s.name for s in bad),
        reasons=tuple(reasons),
    )
