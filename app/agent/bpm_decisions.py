"""The Bounded-Price Mechanism's decisions for one participant, on its private cost model.

Rules (DESIGN.md "Moves"; Balazinska et al., NSDI 2004):
- Threshold: the load at which the marginal cost equals the contracts' price (their mean
  midpoint); a participant below it has nothing to shed.
- Offer: to online partners, cheapest contract first. The set S is built from the largest tasks
  down while shedding it keeps the giver at or above its threshold and the giver's average
  marginal cost of S stays above the contract's lowest price plus the hysteresis band. The price
  is the most the giver would pay (its MC of S less the band), clipped to the contract's range:
  a partner accepting at that price is paid more than its cost, the giver saves more than it pays.
- Accept: the partner takes offered tasks, smallest first, while its average marginal cost of
  taking them stays below the price less the band (partial acceptance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.agent.decisions import ContractView, OfferPlan
from app.federation.document import ParticipantSpec
from app.market.cost_models import CostModel, build_cost_model, marginal_cost


def _threshold_for(model: CostModel, price: float) -> float:
    """Largest load whose marginal cost is at most ``price`` (bisection; MC is increasing)."""
    lo, hi = 0.0, model.capacity * 4
    if marginal_cost(model, 0.0, 0.0) >= price:
        return 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if marginal_cost(model, mid, 0.0) <= price:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class BpmDecisions:
    model: CostModel
    hysteresis: float = 0.01

    @classmethod
    def for_participant(cls, spec: ParticipantSpec, hysteresis: float) -> BpmDecisions:
        return cls(build_cost_model(spec.cost_model, spec.capacity), hysteresis)

    @classmethod
    def for_model(cls, spec: Mapping[str, Any], capacity: float, hysteresis: float) -> BpmDecisions:
        return cls(build_cost_model(spec, capacity), hysteresis)

    def marginal_cost(self, load: float) -> float:
        mc = marginal_cost(self.model, load, 0.0)
        # At or past capacity the M/M/1 cost is infinite and its difference quotient is NaN.
        return mc if math.isfinite(mc) else math.inf

    def threshold(self, contracts: Sequence[ContractView]) -> float:
        if not contracts:
            return self.model.capacity
        price = sum((c.price_min + c.price_max) / 2 for c in contracts) / len(contracts)
        return _threshold_for(self.model, price)

    def plan_offer(
        self,
        *,
        load: float,
        movable: Mapping[str, float],
        contracts: Sequence[ContractView],
        partner_online: Mapping[str, bool],
    ) -> OfferPlan | None:
        threshold = self.threshold(contracts)
        if load <= threshold:
            return None
        band = self.hysteresis
        for contract in sorted(contracts, key=lambda c: (c.price_min + c.price_max) / 2):
            if not partner_online.get(contract.partner, False):
                continue
            chosen: list[str] = []
            shed = 0.0
            for task, task_load in sorted(movable.items(), key=lambda kv: (-kv[1], kv[0])):
                if task_load <= 0 or load - shed - task_load < threshold:
                    continue
                mc = marginal_cost(self.model, load, -(shed + task_load))
                if mc > contract.price_min + band:
                    chosen.append(task)
                    shed += task_load
            if not chosen:
                continue
            saving = marginal_cost(self.model, load, -shed)
            price = min(contract.price_max, max(contract.price_min, saving - band))
            if math.isfinite(price) and saving > price + band / 2:
                return OfferPlan(contract.id, contract.partner, tuple(chosen), price)
        return None

    def choose_accepted(
        self, *, load: float, offered: Mapping[str, float], price: float
    ) -> list[str]:
        taken: list[str] = []
        added = 0.0
        for task, task_load in sorted(offered.items(), key=lambda kv: (kv[1], kv[0])):
            if task_load <= 0:
                continue
            if marginal_cost(self.model, load, added + task_load) < price - self.hysteresis:
                taken.append(task)
                added += task_load
        return taken
