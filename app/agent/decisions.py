"""What an agent needs from the market engine, as one small interface.

The agent knows its own cost model (private) and sees its contracts, its hosted tasks and offers
addressed to it. ``Decisions`` turns that into BPM actions; ``BpmDecisions`` implements it with
the pure engine in ``app.market`` so the live agents decide exactly as the simulator does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ContractView:
    id: int
    partner: str
    price_min: float
    price_max: float
    min_move_seconds: float


@dataclass(frozen=True)
class OfferPlan:
    contract_id: int
    partner: str
    tasks: tuple[str, ...]
    price: float


class Decisions(Protocol):
    def marginal_cost(self, load: float) -> float:
        """Marginal cost per unit load at ``load`` (for reports and heartbeats)."""
        ...

    def load_at_price(self, price: float) -> float:
        """The load up to which taking load stays rational at ``price`` (MC = price - band)."""
        ...

    def threshold(self, contracts: Sequence[ContractView]) -> float:
        """The load above which shedding pays, given the contracts' prices."""
        ...

    def plan_offer(
        self,
        *,
        load: float,
        movable: Mapping[str, float],
        contracts: Sequence[ContractView],
        partner_online: Mapping[str, bool],
    ) -> OfferPlan | None:
        """Tasks to offer, to whom and at what price; None when keeping them is cheaper."""
        ...

    def choose_accepted(
        self, *, load: float, offered: Mapping[str, float], price: float
    ) -> list[str]:
        """The subset of offered tasks whose load keeps this participant's MC below the price."""
        ...
