"""The live agent's BPM decisions: a thin adapter over the pure engine in ``app.market.bpm``.

The agent and the simulator decide with the same functions. One difference is forced by the
live protocol, which has no counter-offer message: the giver cannot learn the taker's
reservation price before it names a price, so it names the split-the-difference price against
the lowest reservation a taker can have (the contract's ``price_min``). That is the price the
simulator reaches whenever the taker's marginal cost plus the band is below ``price_min``, the
usual case for a partner with room. Chained moves and move-back are the coordinator's business,
not this per-participant decision.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.federation.document import ParticipantSpec
from app.market import bpm, copies, protocol
from app.market.cost_models import (
    CostModel,
    build_cost_model,
    marginal_cost,
    threshold_for_price,
)
from app.participant.decisions import ContractView, OfferPlan


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
        mc = self.model.derivative(load)
        return mc if math.isfinite(mc) else math.inf

    def load_at_price(self, price: float) -> float:
        return threshold_for_price(self.model, price - self.hysteresis)

    def threshold(self, contracts: Sequence[ContractView]) -> float:
        return bpm.capacity_threshold(self.model, [(c.price_min, c.price_max) for c in contracts])

    def plan_offer(
        self,
        *,
        load: float,
        movable: Mapping[str, float],
        contracts: Sequence[ContractView],
        partner_online: Mapping[str, bool],
        replicas: Collection[str] = (),
        held_by: Mapping[str, Collection[str]] | None = None,
        too_large: Mapping[str, float] | None = None,
    ) -> OfferPlan | None:
        delta = self.hysteresis
        every = bpm.ranked_from_mapping(movable)
        for contract in sorted(contracts, key=lambda c: (c.price_min, c.price_max, c.partner)):
            if not partner_online.get(contract.partner, False):
                continue
            # Never propose a second copy to the partner, nor a replica over a contract that
            # does not allow replica hosting (app.market.copies, as the simulator).
            held = (held_by or {}).get(contract.partner, ())
            # A partner that refused a whole offer had no room for its smallest task: offer it
            # smaller ones (sizing offers to the partner's spare room, which only it knows).
            limit = (too_large or {}).get(contract.partner, math.inf)
            ranked = [
                item
                for item in every
                if item[0] not in held
                and item[1] < limit - 1e-9
                and copies.may_travel(item[0] in replicas, [contract.replica_hosting])
            ]
            expected = bpm.offer_set(self.model, load, ranked, contract.price_min, delta)
            if not expected:
                continue
            giver_max = bpm.giver_reservation(self.model, load, expected, contract.price_max, delta)
            price = bpm.split_price(giver_max, contract.price_min)
            if price is None:
                continue
            # Only the tasks the giver still saves on at that price, counting earlier ones.
            chosen: list[str] = []
            removed = 0.0
            for name, size in bpm.offer_list(self.model, load, ranked, contract.price_min, delta):
                if marginal_cost(self.model, load - removed, -size) > price + delta:
                    chosen.append(name)
                    removed += size
            if chosen:
                shed = tuple(t for t in chosen if t in replicas)
                reservation = protocol.giver_reservation(self.model, load, removed, delta)
                return OfferPlan(
                    contract.id,
                    contract.partner,
                    tuple(chosen),
                    price,
                    shed,
                    # Above the range it says no more than price_max would (the registry clips).
                    max(price, min(reservation, contract.price_max)),
                )
        return None

    def returns(
        self, *, load: float, task_load: float, price: float, held_for: float, min_move: float
    ) -> bool:
        placement = protocol.Placement("", task_load, "", price, 0.0, min_move)
        return protocol.host_returns(
            placement, protocol.Side(self.model, load), held_for, self.hysteresis
        )

    def taker_reservation(self, load: float, taken: float) -> float:
        return protocol.taker_reservation(self.model, load, taken, self.hysteresis)

    def choose_accepted(
        self,
        *,
        load: float,
        offered: Mapping[str, float],
        price: float,
        held: Collection[str] = (),
    ) -> list[str]:
        """Offered tasks, largest first, while the marginal cost after taking them stays below
        the price less the band (partial acceptance); never one this participant already
        hosts a copy of (``held``)."""
        taken: list[str] = []
        added = 0.0
        ranked = copies.receivable(bpm.ranked_from_mapping(offered), lambda name: name, held)
        for name, size in ranked:
            if self.model.derivative(load + added + size) < price - self.hysteresis:
                taken.append(name)
                added += size
        return taken
