"""The Bounded-Price Mechanism's decisions, as pure functions of one side's private state.

The rules (DESIGN.md, "The market"; Balazinska, Balakrishnan and Stonebraker, "Contract-Based
Load Management in Federated Distributed Systems", NSDI 2004):

- A giver ranks its movable tasks largest first: with a cost that depends on total load, the
  largest task's removal lowers its marginal cost the most. It offers, to its cheapest contract
  first, every task whose *incremental* removal cost per unit exceeds the lowest price it could
  pay (``price_min + delta``); ranked that way, each next task saves less per unit than the one
  before (D is convex), so that set (``offer_set``) is what it expects to shed and prices its
  reservation on; the offer itself also lists every further task worth shedding on its own
  (``offer_list``), for a partner that cannot take the large ones.
- Reservation prices: the giver pays at most ``min(price_max, MC_giver(S) - delta)`` per unit,
  MC_giver(S) being the average marginal cost of the offered set; the taker accepts no less than
  ``max(price_min, MC_taker(L) + delta)``, its marginal cost at its current load plus the band.
- The final price is the midpoint of the two reservation prices (the split-the-difference
  double auction of Chatterjee and Samuelson, "Bargaining under Incomplete Information",
  Operations Research 1983). Both reservations lie inside [price_min, price_max], so the
  midpoint does too; there is no deal when the taker's reservation is above the giver's.
  The protocol's ``negotiated_price`` (``app.market.protocol``) is the same rule on unclipped
  reservations, and what every driver prices with; the clipped helpers here stay for callers
  not yet switched to it.
- Partial acceptance: going down the offer, the taker takes a task when the giver still saves
  more than ``price + delta`` per unit on that task *and* the taker's marginal cost at its new
  load stays below ``price - delta`` ("j accepts the subset that keeps its MC below p"). Every
  moved task is therefore individually rational for both sides, the hysteresis band holds on
  both, and every move strictly lowers the federation's total cost (by at least
  2 * delta * load), which is why a static federation stops moving after finitely many moves.
- Move-back: after the contract's minimum move duration, the host returns a task to the
  participant it came from when that is cheaper for both at the price they agreed
  (``app.market.protocol.move_back``).
- Chained moves: a partner that cannot absorb an offer may forward it along its own contracts
  (A to B to C). The relay's cost does not change; it is paid on the way in at least what it
  pays on the way out (``leg_prices``).

Prices are per unit load per second; payments accrue as price x task load x seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from app.market.cost_models import CostModel, marginal_cost, threshold_for_price

Item = tuple[str, float]  # (task name, load)


def rank_for_shedding(tasks: Iterable[Item]) -> list[Item]:
    """Largest first (their removal lowers marginal cost most), then by name for determinism."""
    return sorted((t for t in tasks if t[1] > 0), key=lambda t: (-t[1], t[0]))


def offer_set(
    model: CostModel, load: float, ranked: Sequence[Item], floor: float, delta: float
) -> list[Item]:
    """The tasks worth shedding when the price can be as low as ``floor``."""
    chosen: list[Item] = []
    removed = 0.0
    for name, size in ranked:
        if marginal_cost(model, load - removed, -size) > floor + delta:
            chosen.append((name, size))
            removed += size
    return chosen


def worth_offering(
    model: CostModel, load: float, ranked: Sequence[Item], floor: float, delta: float
) -> bool:
    """Whether ``offer_set`` is non-empty, without building it: its first task is the first one
    worth shedding on its own (nothing removed yet), so one task passing that test decides.
    The test stops at that task; ``offer_set`` would go on through every later one."""
    bar = floor + delta
    return any(marginal_cost(model, load, -size) > bar for _, size in ranked)


def offer_list(
    model: CostModel, load: float, ranked: Sequence[Item], floor: float, delta: float
) -> list[Item]:
    """What the giver puts in its offer: every task worth shedding on its own at ``floor``.

    A superset of ``offer_set``: when the taker cannot take the first, large tasks, smaller ones
    further down are still on the table (``accept_subset`` re-checks the giver's saving with
    what has actually been taken).
    """
    return [t for t in ranked if marginal_cost(model, load, -t[1]) > floor + delta]


def set_load(items: Iterable[Item]) -> float:
    return math.fsum(size for _, size in items)


def giver_reservation(
    model: CostModel, load: float, offered: Sequence[Item], price_max: float, delta: float
) -> float:
    """The most the giver pays per unit for ``offered``: its saving less the band, capped."""
    saving = marginal_cost(model, load, -set_load(offered))
    return min(price_max, saving - delta)


def taker_reservation(model: CostModel, load: float, price_min: float, delta: float) -> float:
    """The least the taker accepts per unit: its current marginal cost plus the band, floored."""
    return max(price_min, model.derivative(load) + delta)


def split_price(giver_max: float, taker_min: float) -> float | None:
    """The midpoint of the two reservation prices, or None when they leave no room for a deal.

    Equal reservations still trade (a fixed-price contract clips both to its one price); the
    strict gains come from the band, which ``accept_subset`` checks task by task.
    """
    if not (math.isfinite(giver_max) and math.isfinite(taker_min)) or taker_min > giver_max:
        return None
    return (giver_max + taker_min) / 2.0


def leg_prices(
    giver_max: float, taker_min: float, ranges: Sequence[tuple[float, float]]
) -> list[float] | None:
    """Prices for each contract along a chain giver -> relay... -> taker, or None.

    Each leg's price lies in its contract's range, never rises along the chain (a relay is paid
    at least what it pays on), the first is at most the giver's reservation and the last at
    least the taker's. Each leg takes the midpoint of the two reservations, clipped to the
    tightest bounds those constraints allow, so a one-leg chain is exactly ``split_price``.
    """
    if split_price(giver_max, taker_min) is None or not ranges:
        return None
    mid = (giver_max + taker_min) / 2.0
    k = len(ranges)
    # lo[l]: leg l must cover every later leg's floor and the taker's reservation;
    # hi[l]: leg l may not exceed any earlier leg's ceiling nor the giver's reservation.
    lo = [0.0] * k
    hi = [0.0] * k
    running = taker_min
    for leg in range(k - 1, -1, -1):
        running = max(running, ranges[leg][0])
        lo[leg] = running
    running = giver_max
    for leg in range(k):
        running = min(running, ranges[leg][1])
        hi[leg] = running
    prices: list[float] = []
    for leg in range(k):
        if lo[leg] > hi[leg]:
            return None
        prices.append(min(hi[leg], max(lo[leg], mid)))
    return prices


def accept_subset(
    giver: CostModel,
    giver_load: float,
    taker: CostModel,
    taker_load: float,
    offered: Sequence[Item],
    *,
    give_price: float,
    take_price: float,
    delta: float,
) -> list[Item]:
    """Partial acceptance: the offered tasks, in the giver's order, that are rational for both.

    ``give_price`` is what the giver pays (first leg), ``take_price`` what the taker is paid
    (last leg); for a direct move they are the same.
    """
    taken: list[Item] = []
    removed = added = 0.0
    for name, size in offered:
        if not marginal_cost(giver, giver_load - removed, -size) > give_price + delta:
            continue
        if not taker.derivative(taker_load + added + size) < take_price - delta:
            continue
        taken.append((name, size))
        removed += size
        added += size
    return taken


def threshold_price(ranges: Iterable[tuple[float, float]]) -> float | None:
    """The price a participant's capacity threshold is measured at: its contracts' mean midpoint."""
    mids = [(lo + hi) / 2.0 for lo, hi in ranges]
    return math.fsum(mids) / len(mids) if mids else None


def capacity_threshold(model: CostModel, ranges: Iterable[tuple[float, float]]) -> float:
    """The load where the marginal cost meets the contracts' price; the capacity without any."""
    price = threshold_price(ranges)
    if price is None:
        return model.capacity
    return threshold_for_price(model, price)


def payment(price: float, load: float, seconds: float) -> float:
    """What a payer owes for hosting ``load`` for ``seconds`` at ``price`` per unit per second."""
    return price * load * seconds


def ranked_from_mapping(tasks: Mapping[str, float]) -> list[Item]:
    return rank_for_shedding(tasks.items())
