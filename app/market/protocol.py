"""The federation protocol, once, as pure rules: frozen dataclasses in, decisions out.

Every driver of the Bounded-Price Mechanism decides with these functions: the live participant
node (``app.participant``), the per-task simulator (``app.market.simulator``), the
large-federation rounds (``app.market.rounds`` and their Spark twin ``spark_jobs.whatif.large``)
and the registry, which sets the agreed price of an offer from both sides' reservation prices
(``app.offers.service``). A fix to a rule here reaches all of them.

Prices are per unit load per second. ``delta`` is the hysteresis band (DESIGN.md, "Moves").

**Reservation prices.** A giver shedding a set S of load s at load L pays at most its saving per
unit less the band; a taker taking S at load L accepts no less than its added cost per unit plus
the band (both are the average marginal cost of DESIGN.md, |D(L -/+ s) - D(L)| / s)::

    giver_reservation(model, L, s, delta) = MC_giver(L, -s) - delta
    taker_reservation(model, L, s, delta) = MC_taker(L, +s) + delta

With ``s = 0`` they are the derivative at L (the first unit): the quote a side can give before it
knows the set (the simulator's taker quotes that way; partial acceptance then keeps every taken
task below the price, so the taken set is rational too).

**Negotiated price** (``negotiated_price``): a deal exists only when the taker's reservation is at
most the giver's and the interval between them meets the contract's range [price_min, price_max];
the price is the midpoint of that overlap. Contracts fix the range ahead of time and the parties
negotiate only inside it (Balazinska, Balakrishnan and Stonebraker, "Contract-Based Load
Management in Federated Distributed Systems", NSDI 2004, section 4: bounded-price contracts);
the midpoint is the split-the-difference double auction (Chatterjee and Samuelson, Operations
Research 1983). Because the price lies between both reservations, each side gains at least
``delta`` per unit: individual rationality (DESIGN.md invariant 4) with a strict margin.

**Asking price** (``asking_price``): the live protocol has no counter-offer, so a giver names its
price against the lowest reservation a taker can have (the contract's ``price_min``); the
registry may later raise it to the negotiated price when the taker sends its own reservation
(never above the giver's reservation, never below the asking price).

**Chains** (``chain_prices``): load may travel A -> B -> C; each relay is paid at least what it
pays on, so leg prices never rise; a one-leg chain is exactly ``negotiated_price``. Live agents,
which have no three-party transaction, make room first (``plan_room``) and take afterwards
(``take_after_room``): the relay's load never rises and it pays on at most what it is paid.

**Offer discipline** (``may_offer``): one offer outstanding per participant, none while a move it
takes part in is in flight, offers examined once per offer interval, and a partner that refused
(or took only part, or just tried to shed load itself) sits out ``refusal_backoff_intervals``
offer intervals.

**Move-back** (``move_back``): once the contract's ``min_move_seconds`` have passed since a move,
the host returns a task to the participant it came from (its owner, or the previous host of a
chain) when that is strictly cheaper for both at the price in force: the host saves more than it
is paid, the origin's added cost is less than the payment it stops. It is the negotiated-price
rule with the range pinned to that price: ``negotiated_price(host_res, origin_res, p, p)``. A task
that has just moved at price p never qualifies to move back under the same loads (its taker's
saving on returning it is exactly its cost of taking it, at most p - delta), so the rule cannot
oscillate.

**For the live participant node** (``app.participant``), each current rule has its call here,
value for value:

- offer price: ``bpm.split_price(bpm.giver_reservation(model, load, S, price_max, delta),
  price_min)`` is ``asking_price(giver_reservation(model, load, set_load(S), delta), price_min,
  price_max)``; send that reservation as the offer's ``reservation_price``;
- acceptance: partial acceptance stays ``choose_accepted`` (``bpm.accept_subset``'s taker half);
  send ``taker_reservation(model, load, set_load(taken), delta)`` as the acceptance's
  ``reservation_price``, and the registry answers with the ``agreed_price``;
- offer gate and back-off: ``may_offer(OfferGate(now, last_offer_at, open_offers,
  moves_in_flight, relays_pending, refused_at, offered_at), OfferTiming(offer_interval,
  refusal_backoff_intervals))``, ``available_partners(gate, online, timing)`` and
  ``counts_as_refusal(status)``;
- relays: ``plan_room`` and ``take_after_room`` take the same arguments as
  ``app/participant/relay.py``'s (a ``ContractView`` is a ``ContractTerms``);
- move-back: the host proposes with ``host_returns(Placement(task, load, came_from, price,
  moved_at, min_move_seconds), Side(model, load), now, delta)``, the origin accepts with
  ``origin_takes_back(placement, Side(model, load), delta)``; ``move_back`` is both halves at
  once, for a driver that knows both sides (the simulator).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from app.market import bpm
from app.market.cost_models import CostModel, marginal_cost

Item = bpm.Item  # (task name, load)
FloatArray = npt.NDArray[np.float64]

__all__ = [
    "ContractTerms",
    "Item",
    "MoveBack",
    "OfferGate",
    "OfferTiming",
    "Placement",
    "RelayPlan",
    "Side",
    "accept_subset",
    "asking_price",
    "available_partners",
    "chain_prices",
    "counts_as_refusal",
    "giver_reservation",
    "host_returns",
    "may_offer",
    "move_back",
    "move_back_due",
    "negotiated_price",
    "negotiated_prices",
    "origin_takes_back",
    "plan_room",
    "reservation_of_items",
    "set_load",
    "take_after_room",
    "taker_reservation",
]

set_load = bpm.set_load
accept_subset = bpm.accept_subset


# --- prices ----------------------------------------------------------------------------------


def negotiated_price(
    giver_reservation: float, taker_reservation: float, price_min: float, price_max: float
) -> float | None:
    """The agreed price per unit, or None when no price works for both sides.

    ``giver_reservation`` is the most the giver pays per unit, ``taker_reservation`` the least the
    taker accepts. The deal exists only when ``taker_reservation <= giver_reservation`` and that
    interval meets [price_min, price_max]; the price is the midpoint of the overlap
    [max(taker, price_min), min(giver, price_max)]. The result therefore lies in the contract's
    range and between both reservations. NaN inputs, an empty range, and an unbounded overlap
    (both the giver and the range without a ceiling) give None.
    """
    values = (giver_reservation, taker_reservation, price_min, price_max)
    if any(math.isnan(v) for v in values) or price_min > price_max:
        return None
    if taker_reservation > giver_reservation:
        return None
    low = max(taker_reservation, price_min)
    high = min(giver_reservation, price_max)
    if low > high or not (math.isfinite(low) and math.isfinite(high)):
        return None
    return (low + high) / 2.0


def negotiated_prices(
    giver_reservation: FloatArray,
    taker_reservation: FloatArray,
    price_min: FloatArray,
    price_max: FloatArray,
) -> FloatArray:
    """``negotiated_price`` element-wise on arrays; NaN where there is no deal.

    The operations are those of the scalar rule in the same order (max, min, sum, halve), so a
    Spark column expression written the same way gives identical doubles
    (``spark_jobs.whatif.large``).
    """
    low = np.maximum(taker_reservation, price_min)
    high = np.minimum(giver_reservation, price_max)
    with np.errstate(invalid="ignore"):
        price = (low + high) / 2.0
        deal = (
            (taker_reservation <= giver_reservation)
            & (low <= high)
            & np.isfinite(low)
            & np.isfinite(high)
            & (price_min <= price_max)
        )
    return np.where(deal, price, np.nan)


def asking_price(giver_reservation: float, price_min: float, price_max: float) -> float | None:
    """The price a giver names without knowing the taker: negotiated against ``price_min``.

    It is the lowest price ``negotiated_price`` can reach for this giver and contract, so a
    taker that later sends its own reservation is never paid less than it was offered.
    """
    return negotiated_price(giver_reservation, price_min, price_min, price_max)


def chain_prices(
    giver_reservation: float, taker_reservation: float, ranges: Sequence[tuple[float, float]]
) -> list[float] | None:
    """Prices for each contract along a chain giver -> relay... -> taker, or None.

    Each leg's price lies in its contract's range and never rises along the chain (a relay is
    paid at least what it pays on); the first is at most the giver's reservation and the last at
    least the taker's. Each leg takes the midpoint of the reservations clipped to the first and
    last contracts, pulled into the tightest bounds those constraints allow: a one-leg chain is
    exactly ``negotiated_price``.
    """
    if not ranges or math.isnan(giver_reservation) or math.isnan(taker_reservation):
        return None
    return bpm.leg_prices(
        min(giver_reservation, ranges[0][1]), max(taker_reservation, ranges[-1][0]), ranges
    )


# --- reservations ------------------------------------------------------------------------------


def giver_reservation(model: CostModel, load: float, shed: float, delta: float) -> float:
    """The most a giver at ``load`` pays per unit to shed ``shed`` units: MC(load, -shed) - delta.

    Infinite when its cost is infinite now (an M/M/1 participant at or past capacity).
    """
    return marginal_cost(model, load, -shed) - delta


def taker_reservation(model: CostModel, load: float, taken: float, delta: float) -> float:
    """The least a taker at ``load`` accepts per unit to take ``taken`` units: MC(load, +taken)
    + delta. Infinite when taking them would make its cost infinite."""
    return marginal_cost(model, load, taken) + delta


# --- offer discipline --------------------------------------------------------------------------


@dataclass(frozen=True)
class OfferTiming:
    """How often a participant examines offers and how long a refusal keeps a partner aside.

    Borealis's constants are the defaults: offers examined every 7 s; the back-off is counted in
    offer intervals.
    """

    offer_interval: float = 7.0
    refusal_backoff_intervals: int = 3

    @property
    def backoff_seconds(self) -> float:
        return self.refusal_backoff_intervals * self.offer_interval


@dataclass(frozen=True)
class OfferGate:
    """What a would-be giver knows about its own market activity at ``now`` (seconds).

    ``last_offer_at`` is when it last examined whether to offer; ``open_offers`` its offers still
    open; ``moves_in_flight`` the prepared, not yet committed or aborted movements it takes part
    in; ``relays_pending`` room-making relays it is waiting on; ``refused_at`` when each partner
    last refused it (or took only part of an offer); ``offered_at`` when each partner last
    offered load to it (a partner shedding load is loaded itself).
    """

    now: float
    last_offer_at: float = -math.inf
    open_offers: int = 0
    moves_in_flight: int = 0
    relays_pending: int = 0
    refused_at: Mapping[str, float] = field(default_factory=dict)
    offered_at: Mapping[str, float] = field(default_factory=dict)


def _recent(when: Mapping[str, float], partner: str, now: float, window: float) -> bool:
    return now - when.get(partner, -math.inf) < window


def may_offer(
    gate: OfferGate, timing: OfferTiming = OfferTiming(), partner: str | None = None
) -> bool:
    """Whether the participant may make an offer now (to ``partner``, when one is named).

    No offer before an offer interval has passed since it last examined, none while one of its
    offers is open (one outstanding), none while a move or relay it takes part in is in flight;
    and not to a partner that refused it, or offered load to it, within the back-off.
    """
    if gate.now - gate.last_offer_at < timing.offer_interval:
        return False
    if gate.open_offers > 0 or gate.moves_in_flight > 0 or gate.relays_pending > 0:
        return False
    if partner is None:
        return True
    window = timing.backoff_seconds
    return not (
        _recent(gate.refused_at, partner, gate.now, window)
        or _recent(gate.offered_at, partner, gate.now, window)
    )


def available_partners(
    gate: OfferGate, online: Mapping[str, bool], timing: OfferTiming = OfferTiming()
) -> dict[str, bool]:
    """Each partner: online and not inside its refusal back-off (whatever the offer gate says)."""
    window = timing.backoff_seconds
    return {
        partner: up
        and not _recent(gate.refused_at, partner, gate.now, window)
        and not _recent(gate.offered_at, partner, gate.now, window)
        for partner, up in online.items()
    }


_REFUSALS = frozenset({"rejected", "partially_accepted", "expired"})


def counts_as_refusal(status: str) -> bool:
    """Whether an offer that ended in ``status`` puts its addressee into the back-off.

    Prices are often equal across contracts, so "cheapest partner first" would name the same
    partner forever; one that refused, took only part, or let the offer expire is skipped for a
    few intervals so the giver tries the next (Borealis: A sheds to B, then to C).
    """
    return status in _REFUSALS


# --- move-back ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One participant's private position: its cost model and its load now."""

    model: CostModel
    load: float


@dataclass(frozen=True)
class Placement:
    """A task the host runs because it was moved there.

    ``came_from`` is the participant it came from (its owner after a direct move, the previous
    host after a chain), ``price`` what that participant pays per unit per second for it,
    ``moved_at`` when the move committed, ``min_move_seconds`` the contract's minimum duration.
    """

    task: str
    load: float
    came_from: str
    price: float
    moved_at: float
    min_move_seconds: float


@dataclass(frozen=True)
class MoveBack:
    """Return ``task`` to ``to``; the payment at ``price`` per unit stops.

    ``host_saving`` and ``origin_cost`` are per unit: what the host saves by no longer running it,
    what the origin's cost rises by running it again. ``host_saving > price + delta`` and
    ``origin_cost < price - delta``.
    """

    task: str
    to: str
    price: float
    host_saving: float
    origin_cost: float


def move_back_due(placement: Placement, now: float) -> bool:
    """The contract's minimum move duration has passed since the move."""
    return now - placement.moved_at >= placement.min_move_seconds


def host_returns(placement: Placement, host: Side, now: float, delta: float) -> bool:
    """The host's half of a move-back: due, and it saves more than it is paid (plus the band).

    ``host.load`` includes the task. A live host uses this to decide to propose the move-back.
    """
    if not move_back_due(placement, now):
        return False
    saving = giver_reservation(host.model, host.load, placement.load, delta)
    return saving > placement.price


def origin_takes_back(placement: Placement, origin: Side, delta: float) -> bool:
    """The origin's half: its added cost plus the band is below the payment it stops.

    ``origin.load`` excludes the task. A live origin uses this to accept a proposed move-back.
    """
    return taker_reservation(origin.model, origin.load, placement.load, delta) < placement.price


def move_back(
    placement: Placement, host: Side, origin: Side, *, now: float, delta: float
) -> MoveBack | None:
    """Whether to return ``placement``'s task to where it came from now; None to keep it.

    Never before ``min_move_seconds``; otherwise exactly when ``negotiated_price`` with the
    range pinned to the price in force finds a deal with strict gains on both sides:
    ``origin_reservation < price < host_reservation``.
    """
    if not move_back_due(placement, now):
        return None
    saving = marginal_cost(host.model, host.load, -placement.load)
    added = marginal_cost(origin.model, origin.load, placement.load)
    host_res, origin_res = saving - delta, added + delta
    p = placement.price
    if negotiated_price(host_res, origin_res, p, p) is None:
        return None
    if not (origin_res < p < host_res):
        return None  # equal: neither side would gain, and a tie could flip back and forth
    return MoveBack(placement.task, placement.came_from, p, saving, added)


# --- chained moves for live agents -------------------------------------------------------------


class ContractTerms(Protocol):
    """A contract as one party sees it. ``app.participant.decisions.ContractView`` fits."""

    @property
    def id(self) -> int: ...
    @property
    def partner(self) -> str: ...
    @property
    def price_min(self) -> float: ...
    @property
    def price_max(self) -> float: ...


# A chain may pass load on through this many relays (A -> B -> C -> ... with MAX_RELAY_DEPTH
# relay offers after the first). The simulator forwards breadth-first without a cap; a bound
# keeps a chain of open offers from holding a whole federation's offer slots at once, and 6
# relays already reach every participant of the 995-node, k = 3 graphs the benchmarks generate
# (their diameter is 5-6).
MAX_RELAY_DEPTH = 6


def relay_refusal(chain: Sequence[str], me: str, partner: str) -> str | None:
    """Why a relay of an offer whose chain of givers is ``chain`` (origin first) may not go from
    ``me`` to ``partner``, or None when it may: no load back to anyone upstream (a cycle would
    let a chain pay itself), and no chain longer than ``MAX_RELAY_DEPTH`` relays."""
    if partner in chain or partner == me:
        return f"{partner} is a giver in this chain; a relay cannot send load back to it"
    if len(chain) > MAX_RELAY_DEPTH:
        return f"this chain already has {len(chain) - 1} relays, the most allowed"
    return None


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
    contracts: Sequence[ContractTerms],
    partner_available: Mapping[str, bool],
    last_refused: Mapping[str, float] | None = None,
    chain: Sequence[str] = (),
) -> RelayPlan | None:
    """Which of my tasks to shed, to whom and at what price, to make room for an offer.

    A participant C offered load by B that cannot absorb it first sheds up to the offered load
    of its own to another partner D, then takes B's tasks (``take_after_room``): C's load does
    not rise. The onward price is ``asking_price`` with the upstream price as C's reservation
    (it pays on at most what it is paid). Partners in contract-price order; among equally priced
    ones the one that refused longest ago (or never) goes first, so a refusal that has aged out
    of the back-off does not make the same partner first choice forever. ``chain`` lists the
    givers upstream of the offer (origin first, ``upstream`` last): none of them is a candidate,
    so load never travels back along its own chain.
    """
    refused = last_refused or {}

    def order(c: ContractTerms) -> tuple[float, float, float, str]:
        return (c.price_min, c.price_max, refused.get(c.partner, -math.inf), c.partner)

    for contract in sorted(contracts, key=order):
        if contract.partner == upstream or contract.partner in chain:
            continue
        if not partner_available.get(contract.partner, False):
            continue
        price = asking_price(upstream_price, contract.price_min, contract.price_max)
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


def reservation_of_items(
    model: CostModel, load: float, items: Iterable[Item], delta: float, *, giver: bool
) -> float:
    """A side's reservation for a list of (task, load) items (``giver`` or taker)."""
    size = set_load(items)
    if giver:
        return giver_reservation(model, load, size, delta)
    return taker_reservation(model, load, size, delta)
