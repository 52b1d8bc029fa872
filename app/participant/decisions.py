"""What an agent needs from the market engine, as one small interface.

The agent knows its own cost model (private) and sees its contracts, its hosted tasks and offers
addressed to it. ``Decisions`` turns that into BPM actions; ``BpmDecisions`` implements it with
the pure engine in ``app.market`` so the live agents decide exactly as the simulator does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ContractView:
    id: int
    partner: str
    price_min: float
    price_max: float
    min_move_seconds: float
    replica_hosting: bool = False  # its availability terms let replicas travel over it


@dataclass(frozen=True)
class OfferPlan:
    contract_id: int
    partner: str
    tasks: tuple[str, ...]
    price: float
    replicas: tuple[str, ...] = ()  # which of ``tasks`` are replicas this participant hosts
    # The most the giver would pay per unit for these tasks (its saving less the band), sent
    # with the offer so the registry can settle the price between both sides' reservations.
    reservation: float | None = None


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
        replicas: Collection[str] = (),
        held_by: Mapping[str, Collection[str]] | None = None,
        too_large: Mapping[str, float] | None = None,
    ) -> OfferPlan | None:
        """Tasks to offer, to whom and at what price; None when keeping them is cheaper.

        ``too_large`` maps a partner to the smallest task load it refused outright lately: only
        smaller tasks are offered to it (it had no room for that one).

        ``replicas`` are the movable names that are replicas (only over replica-hosting
        contracts); ``held_by`` the tasks each partner is known to host a copy of already."""
        ...

    def returns(
        self, *, load: float, task_load: float, price: float, held_for: float, min_move: float
    ) -> bool:
        """Move-back, the host's half: a task held ``held_for`` seconds at ``price`` goes back
        to where it came from, once ``min_move`` seconds have passed and shedding it saves this
        participant more than it is paid (app.market.protocol.host_returns)."""
        ...

    def taker_reservation(self, load: float, taken: float) -> float:
        """The least this participant takes per unit to add ``taken`` units at ``load``."""
        ...

    def choose_accepted(
        self,
        *,
        load: float,
        offered: Mapping[str, float],
        price: float,
        held: Collection[str] = (),
    ) -> list[str]:
        """The subset of offered tasks whose load keeps this participant's MC below the price."""
        ...
