"""Chained moves for live agents: make room at a partner, then take the offered load. Pure.

The simulator forwards an offer along contracts in one step (``app.market.bpm.leg_prices``). Live
agents have no three-party transaction, so a participant C that is offered load by B but cannot
absorb it first sheds as much of its own load to another partner D, at a price no higher than
B pays it, and takes B's tasks only once that move is done and only up to the load it shed
(plus whatever it could take anyway). C's load, and so its cost, does not rise, and it is paid
at least what it pays on: the same individual rationality as the simulator's relay. This is how
the Borealis demo's third act runs live: load flows C to D, then B to C.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.market import bpm
from app.participant.decisions import ContractView


@dataclass(frozen=True)
class RelayPlan:
    contract_id: int
    partner: str
    tasks: tuple[str, ...]
    price: float


def plan_room(
    *,
    upstream: str,
    upstream_price: float,
    offered_load: float,
    movable: Mapping[str, float],
    contracts: Sequence[ContractView],
    partner_available: Mapping[str, bool],
    last_refused: Mapping[str, float] | None = None,
) -> RelayPlan | None:
    """Which of my tasks to shed, to whom and at what price, to make room for an offer.

    The onward price is the midpoint of what I can afford to pay on (the upstream price, capped
    by the onward contract's maximum) and the onward contract's minimum: the same split as a
    direct offer, never above what I am paid. Among equally priced partners the one that refused
    longest ago (or never) goes first, so a refusal that has aged out of the back-off does not
    make the same partner first choice forever.
    """
    refused = last_refused or {}

    def order(c: ContractView) -> tuple[float, float, float, str]:
        return (c.price_min, c.price_max, refused.get(c.partner, float("-inf")), c.partner)

    for contract in sorted(contracts, key=order):
        if contract.partner == upstream or not partner_available.get(contract.partner, False):
            continue
        ceiling = min(upstream_price, contract.price_max)
        price = bpm.split_price(ceiling, contract.price_min)
        if price is None:
            continue
        chosen: list[str] = []
        shed = 0.0
        for name, size in bpm.ranked_from_mapping(movable):
            if shed + size <= offered_load + 1e-9:
                chosen.append(name)
                shed += size
        if chosen:
            return RelayPlan(contract.id, contract.partner, tuple(chosen), price)
    return None


def take_after_room(
    *,
    load_now: float,
    load_before: float,
    offered: Mapping[str, float],
    room_below_price: float,
) -> list[str]:
    """Offered tasks, largest first, that keep my load at most where it was before the relay
    began, or else below the load where my marginal cost meets the price (``room_below_price``).
    """
    limit = max(load_before, room_below_price)
    taken: list[str] = []
    added = 0.0
    for name, size in bpm.ranked_from_mapping(offered):
        if load_now + added + size <= limit + 1e-9:
            taken.append(name)
            added += size
    return taken
