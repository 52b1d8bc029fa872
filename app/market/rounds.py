"""The large-federation round algorithm, in pure NumPy: the reference for the Spark job.

A planner's "100,000 participants" question does not fit the per-task simulator, so the what-if
job runs a coarser, synchronous form of the Bounded-Price Mechanism in rounds (one round = one
offer interval). ``spark_jobs/whatif/large.py`` runs exactly these steps as DataFrame joins and
window functions; this module is the same algorithm on arrays, used to check it on small inputs.

Model (stated here once; both implementations follow it to the float operation):

- Load is a count of unit-size tasks per participant (1 unit = 1 load unit); every participant has
  the Borealis M/M/1 cost D(L) = s L / (C - L), infinite at L >= C. The cost of the L-th unit is
  u(L) = D(L) - D(L-1) = s C / ((C - L)(C - L + 1)), increasing in L.
- A contract (i, j) has a price range [p_min, p_max] per unit load per unit time. Its price in a
  round is the protocol's negotiated price (``app.market.protocol.negotiated_prices``) of the two
  sides' reservation prices for one unit: the giver pays at most its saving less the band,
  u_i(n_i) - delta, the taker takes no less than its cost plus the band, u_j(n_j + 1) + delta;
  the price is the midpoint of their overlap with the range, and there is no offer on the
  contract when they leave no price in it.
- Giver i on contract (i, j) at price p offers every unit whose removal saves more than p + delta
  (delta is the hysteresis band): it keeps K_i(p + delta) units, the largest L with u_i(L) <= q,
  which solves (C - L)(C - L + 1) >= s C / q in closed form. Taker j accepts while each added unit
  costs less than p - delta: up to F_j(p - delta) units, the largest L with u_j(L) < q.
- One round: (1) every contract with something to offer and room to take is a candidate, judged
  on the loads at the start of the round; (2) a participant with a candidate is a giver and does
  not take load in the same round (one offer outstanding, no accepting while shedding); (3) each
  giver offers to its cheapest partner that is not itself a giver (ties: lowest partner id);
  (4) each taker accepts offers in order of price, highest first (ties: lowest giver id), each
  while its own load stays within F_j at that offer's price (partial acceptance). Because F_j falls
  with the price, the accepted total after the k-th offer is max(0, max over l <= k of
  min(offered up to l, F_j(p_l - delta) - n_j)), a running maximum, which is what lets Spark
  compute acceptance with window functions. (5) Chained moves: a participant above its
  threshold that made no direct offer (every partner full or itself giving) offers along its
  shortest chain of contracts to a participant with room below its threshold price and not
  giving (``route_to_room``, breadth-first). One price inside the intersection of the chain's
  ranges is paid on every leg, so each relay is paid exactly what it pays on and its load does
  not change (the Borealis poster's demonstration, step 4: "Load flows from node B to C and
  C to D", seeds/borealis-load-management-ha-poster.txt; DESIGN.md "Load can travel over several
  hops"). The chained offer is priced and accepted by the same rules as a direct one, at the
  chain's end, and competes with direct offers for that taker's room. (5b) Smoothing: a
  participant at or below its threshold that made no direct offer and would still gain by
  shedding a unit at its cheapest floor offers along its shortest chain too
  (``smoothing_offers``), as the per-task simulator and the live nodes offer whenever a task is
  worth shedding at that floor; it is what takes wide price ranges to the continuous optimum
  (``bench/whatif/README.md``, "What separates the final cost from the bound"). (6) Loads
  move; the next round starts.
- Threshold T_i: the largest integer load whose unit cost is at most p*_i + delta, where p*_i is
  the mean midpoint of i's contracts (a participant without contracts: the largest load below its
  capacity). Acceptable: the one rule of ``app.market.acceptability`` with unit tasks, which on
  integer loads is every participant at or below T_i when the total load fits under the total
  of thresholds, otherwise every participant at or above it (``is_acceptable`` counts, and
  ``judge_state`` explains an unacceptable state over the contract graph).
- Move-back: units carry no provenance here, so a unit going back to where it came from is an
  ordinary offer in the other direction of the same contract, priced and accepted by the same
  rule; it happens only when cheaper for both, and never right after the forward move under the
  same loads (the protocol's no-oscillation property). The model has no minimum move duration.
- Individual rationality holds per unit: a giver pays p only for units saving more than p + delta,
  a taker is paid p only for units costing less than p - delta.

Payments: each round reports the price-weighted volume of its moves (units x price, per second
of hosting; a chain's legs net out at the relays, so the volume is what the first giver pays
and the last taker receives). Units never move back in this model, so a round's volume is paid
from its round to the end of the run, which is how the what-if totals it.

Why chains (``bench/whatif/README.md``, "Few contracts suffice"): without them a sparse
federation (2-3 contracts each) stalls when a heavily loaded participant's partners fill up to
their fill level while participants a few contracts away still have room; at a fixed price no
partner can pass load on at a profit, so nothing moves although the federation is underloaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from app.market import protocol
from app.market.acceptability import Acceptability, Position, acceptable_from_counts
from app.market.acceptability import judge_allocation as _judge

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Contracts of the generated federations are priced like the Borealis demo: 0.25 per unit puts an
# M/M/1 participant's threshold at 80% utilisation.
BASE_PRICE = 0.25


class LargeFederationError(ValueError):
    """A large-federation specification that cannot be generated; ``field`` names the option."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field, self.detail = field, detail


@dataclass(frozen=True)
class LargeFederation:
    """Participants 0..n-1 and undirected contracts (a[e], b[e]) with price ranges."""

    capacity: FloatArray
    scale: FloatArray
    load: IntArray
    edge_a: IntArray
    edge_b: IntArray
    price_min: FloatArray
    price_max: FloatArray
    hysteresis: float = 0.005

    @property
    def size(self) -> int:
        return int(self.capacity.shape[0])

    def directed(self) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
        """Both directions of every contract: (giver, taker, price_min, price_max)."""
        giver = np.concatenate([self.edge_a, self.edge_b])
        taker = np.concatenate([self.edge_b, self.edge_a])
        return (
            giver,
            taker,
            np.concatenate([self.price_min, self.price_min]),
            np.concatenate([self.price_max, self.price_max]),
        )


@dataclass(frozen=True)
class RoundRecord:
    round: int
    offers: int
    moves: int
    units_moved: int
    payment_volume: float
    cost: float
    above_threshold: int
    acceptable: bool
    # Moves whose chain passed through at least one relay.
    relayed: int = 0


@dataclass(frozen=True)
class RoundsResult:
    thresholds: IntArray
    final_load: IntArray
    rounds: tuple[RoundRecord, ...]
    # loads[r] is the load vector after round r (loads[0] is the start); kept only when asked.
    loads: tuple[IntArray, ...] = field(default=())
    initial_cost: float = 0.0
    initial_acceptable: bool = False
    # Wall seconds of each round (planning and bookkeeping).
    seconds_per_round: tuple[float, ...] = ()

    @property
    def acceptable(self) -> bool:
        return self.rounds[-1].acceptable if self.rounds else self.initial_acceptable

    @property
    def rounds_to_acceptable(self) -> int | None:
        if self.initial_acceptable:
            return 0
        for record in self.rounds:
            if record.acceptable:
                return record.round
        return None


# --- the cost arithmetic, written operation for operation as the Spark job writes it ------------


def unit_cost(capacity: FloatArray, scale: FloatArray, level: FloatArray) -> FloatArray:
    """u(L) = s C / ((C - L)(C - L + 1)); infinite at or past capacity."""
    room = capacity - level
    with np.errstate(divide="ignore", invalid="ignore"):
        value = scale * capacity / (room * (room + 1.0))
    return np.where(room > 0, value, np.inf)


def _root(capacity: FloatArray, scale: FloatArray, price: FloatArray) -> FloatArray:
    """x* = (-1 + sqrt(1 + 4 s C / q)) / 2: u(C - x) <= q exactly when x >= x*."""
    return (-1.0 + np.sqrt(1.0 + 4.0 * scale * capacity / price)) / 2.0


def keep_level(capacity: FloatArray, scale: FloatArray, price: FloatArray) -> IntArray:
    """Largest L >= 0 with u(L) <= price (price > 0): what a giver keeps."""
    return np.maximum(np.floor(capacity - _root(capacity, scale, price)), 0.0).astype(np.int64)


def fill_level(capacity: FloatArray, scale: FloatArray, price: FloatArray) -> IntArray:
    """Largest L >= 0 with u(L) < price: how far a taker fills (0 when price <= 0)."""
    safe = np.where(price > 0, price, 1.0)
    level = np.maximum(np.ceil(capacity - _root(capacity, scale, safe)) - 1.0, 0.0)
    return np.where(price > 0, level, 0.0).astype(np.int64)


def mm1_cost(capacity: FloatArray, scale: FloatArray, load: FloatArray) -> FloatArray:
    room = capacity - load
    with np.errstate(divide="ignore", invalid="ignore"):
        value = scale * load / room
    return np.where(room > 0, value, np.inf)


def threshold_prices(fed: LargeFederation) -> FloatArray:
    """p*_i: the mean midpoint of participant i's contracts (NaN without contracts)."""
    giver, _, pmin, pmax = fed.directed()
    total = np.bincount(giver, weights=(pmin + pmax) / 2.0, minlength=fed.size)
    count = np.bincount(giver, minlength=fed.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def thresholds(fed: LargeFederation) -> IntArray:
    price = threshold_prices(fed)
    has = ~np.isnan(price)
    level = keep_level(fed.capacity, fed.scale, np.where(has, price, 1.0) + fed.hysteresis)
    below_capacity = (np.ceil(fed.capacity) - 1.0).astype(np.int64)
    return np.where(has, level, below_capacity)


def is_acceptable(load: IntArray, threshold: IntArray) -> bool:
    """The acceptability rule counted in bulk: unit tasks, integer loads and thresholds."""
    return acceptable_from_counts(
        overloaded=bool(load.sum() > threshold.sum()),
        over=int((load > threshold).sum()),
        with_room=int((load < threshold).sum()),
    )


def participant_names(size: int) -> list[str]:
    """P0, P1, ... zero-padded to one width, as the what-if summary names participants."""
    width = len(str(size - 1))
    return [f"P{i:0{width}d}" for i in range(size)]


def judge_state(
    fed: LargeFederation,
    load: IntArray,
    threshold: IntArray,
    *,
    names: list[str] | None = None,
    explain: bool = True,
) -> Acceptability:
    """``acceptability.judge_allocation`` on one state, with the contract graph and each side's
    one-unit reservations (those that price the rounds), so that an unacceptable state says why.
    """
    names = names or participant_names(fed.size)
    level = load.astype(np.float64)
    shed = unit_cost(fed.capacity, fed.scale, level) - fed.hysteresis
    take = unit_cost(fed.capacity, fed.scale, level + 1.0) + fed.hysteresis
    positions = [
        Position(
            names[i],
            float(load[i]),
            float(threshold[i]),
            smallest_task=1.0,
            shed_reservation=float(shed[i]),
            take_reservation=float(take[i]),
        )
        for i in range(fed.size)
    ]
    contracts = (
        zip(
            [names[i] for i in fed.edge_a.tolist()],
            [names[i] for i in fed.edge_b.tolist()],
            fed.price_min.tolist(),
            fed.price_max.tolist(),
            strict=True,
        )
        if explain
        else None
    )
    return _judge(positions, contracts, delta=fed.hysteresis, explain=explain)


# --- one round -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundMoves:
    giver: IntArray
    taker: IntArray
    price: FloatArray
    offered: IntArray
    accepted: IntArray
    # Contracts on the way: 1 for a direct move, more for a chain through relays.
    hops: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass(frozen=True)
class Routes:
    """Each participant's shortest chain to a participant with room (``dist`` -1: none found).

    ``end`` is where the chain ends, ``low``/``high`` the intersection of the price ranges of the
    contracts on it: one price inside it is paid on every leg, so each relay is paid exactly what
    it pays on and its own load does not change (the paper's chained moves, A to B to C, with
    prices that never rise along the chain).
    """

    dist: IntArray
    end: IntArray
    low: FloatArray
    high: FloatArray


def room_price(fed: LargeFederation) -> FloatArray:
    """The price at which a participant's room is judged as a chain's end: its threshold price."""
    return threshold_prices(fed)


# One breadth-first level: (frontier, labelled, end, low, high) -> (v, w, low, high) picked.
LevelStep = Callable[
    [BoolArray, BoolArray, IntArray, FloatArray, FloatArray],
    tuple[IntArray, IntArray, FloatArray, FloatArray],
]


def expand_level(
    giver: IntArray,
    taker: IntArray,
    pmin: FloatArray,
    pmax: FloatArray,
    frontier: BoolArray,
    labelled: BoolArray,
    end: IntArray,
    low: FloatArray,
    high: FloatArray,
) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """One level of ``route_to_room`` over some directed edges: every unlabelled giver v with a
    contract to a frontier participant w whose chain's range still meets the contract's, and
    for each v the smallest (end, w). The pick depends only on v's own edges, so it is the same
    over all edges at once or over any split of them that keeps each giver's edges together
    (the Spark job's partitions by giver)."""
    e = np.flatnonzero(frontier[taker] & ~labelled[giver])
    w = taker[e]
    new_low = np.maximum(low[w], pmin[e])
    new_high = np.minimum(high[w], pmax[e])
    ok = new_low <= new_high
    e, w, new_low, new_high = e[ok], w[ok], new_low[ok], new_high[ok]
    v = giver[e]
    order = np.lexsort((w, end[w], v))
    first = np.ones(order.size, dtype=bool)
    first[1:] = v[order][1:] != v[order][:-1]
    pick = order[first]
    return v[pick], w[pick], new_low[pick], new_high[pick]


def route_to_room(
    fed: LargeFederation,
    has_room: BoolArray,
    wanted: BoolArray,
    *,
    step: LevelStep | None = None,
) -> Routes:
    """Breadth-first labels from every participant with room outwards over the contracts.

    Level d labels every unlabelled participant v with a contract to a participant w labelled at
    level d - 1 whose chain's price range still intersects the contract's; among several, the
    smallest (end, w). It stops as soon as every ``wanted`` participant is labelled (or nothing
    new is reached), so the work is the distance to the nearest room, not the graph's diameter.
    ``step`` runs one level (``expand_level``) elsewhere: the Spark job runs it per partition
    of the edge table.
    """
    if step is None:
        giver, taker, pmin, pmax = fed.directed()

        def step(
            frontier: BoolArray,
            labelled: BoolArray,
            end: IntArray,
            low: FloatArray,
            high: FloatArray,
        ) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
            return expand_level(giver, taker, pmin, pmax, frontier, labelled, end, low, high)

    n = fed.size
    dist = np.full(n, -1, np.int64)
    end = np.full(n, -1, np.int64)
    low = np.full(n, -np.inf)
    high = np.full(n, np.inf)
    seeds = np.flatnonzero(has_room)
    dist[seeds], end[seeds] = 0, seeds
    frontier = has_room.copy()
    level = 0
    while frontier.any() and ((dist < 0) & wanted).any():
        level += 1
        v, w, new_low, new_high = step(frontier, dist >= 0, end, low, high)
        frontier = np.zeros(n, dtype=bool)
        frontier[v] = True
        dist[v] = level
        end[v] = end[w]
        low[v] = new_low
        high[v] = new_high
    return Routes(dist, end, low, high)


def _accept(
    giver: IntArray, taker: IntArray, price: FloatArray, offer: IntArray, room: IntArray
) -> IntArray:
    """Each taker accepts its offers highest price first (ties: lowest giver id), each while its
    load stays within its fill level at that offer's price; the rows must come sorted that way.
    """
    start = np.ones(taker.size, dtype=bool)
    start[1:] = taker[1:] != taker[:-1]
    group = np.cumsum(start) - 1
    cum = np.cumsum(offer)
    cum_before_group = (cum - offer)[start][group]
    offered_so_far = cum - cum_before_group
    capped = np.minimum(offered_so_far, room)
    # Running maximum within each taker's group: shift groups apart so one global pass works.
    spread = int(np.abs(capped).max()) * 2 + 2
    shifted = capped + group * spread
    running = np.maximum.accumulate(shifted) - group * spread
    accepted_total = np.maximum(running, 0)
    previous = np.where(start, 0, np.concatenate([[0], accepted_total[:-1]]))
    return accepted_total - previous


@dataclass(frozen=True)
class EdgeOffers:
    """Per directed contract (giver, taker): the negotiated price, what the giver would offer at
    it, the taker's room at it, and whether that is a candidate (a deal with something to move).
    """

    price: FloatArray
    offer: IntArray
    room: IntArray
    candidate: BoolArray


def edge_offers(
    cap: FloatArray,
    scale: FloatArray,
    load: IntArray,
    delta: float,
    giver: IntArray,
    taker: IntArray,
    pmin: FloatArray,
    pmax: FloatArray,
) -> EdgeOffers:
    """Step (1) of a round on any set of directed edges, from per-participant arrays."""
    n_g = load[giver].astype(np.float64)
    n_t = load[taker].astype(np.float64)
    out_g = unit_cost(cap[giver], scale[giver], n_g)
    in_t = unit_cost(cap[taker], scale[taker], n_t + 1.0)
    negotiated = protocol.negotiated_prices(out_g - delta, in_t + delta, pmin, pmax)
    deal = ~np.isnan(negotiated)
    price = np.where(deal, negotiated, pmin)  # pmin only keeps the arithmetic finite: no offer
    kept = keep_level(cap[giver], scale[giver], price + delta)
    offer = load[giver] - np.minimum(kept, load[giver])
    room = fill_level(cap[taker], scale[taker], price - delta) - load[taker]
    return EdgeOffers(price, offer, room, deal & (offer >= 1) & (room >= 1))


def cheapest_live(
    giver: IntArray, taker: IntArray, offers: EdgeOffers, is_giver: BoolArray
) -> IntArray:
    """Steps (2)-(3): the edge each giver offers on, its cheapest candidate to a partner that is
    not giving itself (ties: lowest partner id); edge indices in giver order. Each giver's pick
    depends only on its own edges (and ``is_giver``)."""
    live = np.flatnonzero(offers.candidate & ~is_giver[taker])
    order = live[np.lexsort((taker[live], offers.price[live], giver[live]))]
    first = np.ones(order.size, dtype=bool)
    first[1:] = giver[order][1:] != giver[order][:-1]
    return order[first]


OfferRows = tuple[IntArray, IntArray, FloatArray, IntArray, IntArray, IntArray]


def direct_rows(
    giver: IntArray, taker: IntArray, offers: EdgeOffers, chosen: IntArray
) -> OfferRows:
    """The chosen direct offers as rows (giver, taker, price, offered, room, hops = 1)."""
    return (
        giver[chosen],
        taker[chosen],
        offers.price[chosen],
        offers.offer[chosen],
        offers.room[chosen],
        np.ones(chosen.size, np.int64),
    )


def accept_offers(rows: Sequence[OfferRows]) -> RoundMoves:
    """Step (4) on every offer of the round (direct and chained): each taker's offers highest
    price first (ties: lowest giver id), accepted in part; the moves sorted that way."""
    g_all, t_all, p_all, o_all, r_all, h_all = (np.concatenate(c) for c in zip(*rows, strict=True))
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    if g_all.size == 0:
        return RoundMoves(empty_i, empty_i, empty_f, empty_i, empty_i, empty_i)
    by_taker = np.lexsort((g_all, -p_all, t_all))
    accepted = _accept(
        g_all[by_taker], t_all[by_taker], p_all[by_taker], o_all[by_taker], r_all[by_taker]
    )
    return RoundMoves(
        g_all[by_taker],
        t_all[by_taker],
        p_all[by_taker],
        o_all[by_taker],
        accepted,
        h_all[by_taker].astype(np.int64),
    )


def plan_round(
    fed: LargeFederation, load: IntArray, *, relays: bool = True, smooth: bool = True
) -> RoundMoves:
    """Offers and acceptances of one round from the loads at its start.

    Direct offers first; then every participant still above its threshold without a direct
    offer (all its partners are full or giving) offers along its shortest chain of relays to a
    participant with room (``route_to_room``), priced by the same negotiation over the chain's
    price range. Both kinds of offer compete for a taker's room in price order.
    """
    giver, taker, pmin, pmax = fed.directed()
    offers = edge_offers(fed.capacity, fed.scale, load, fed.hysteresis, giver, taker, pmin, pmax)
    is_giver = np.zeros(fed.size, dtype=bool)
    is_giver[giver[offers.candidate]] = True
    chosen = cheapest_live(giver, taker, offers, is_giver)
    rows = [direct_rows(giver, taker, offers, chosen)]
    if relays:
        rows.append(
            relay_offers(fed, load, is_giver, giver[chosen], thresholds(fed), room_price(fed))
        )
    if relays and smooth:
        rows.append(smoothing_offers(fed, load, is_giver, giver[chosen], thresholds(fed), rows))
    return accept_offers(rows)


def smoothing_offers(
    fed: LargeFederation,
    load: IntArray,
    is_giver: BoolArray,
    direct: IntArray,
    threshold: IntArray,
    others: Sequence[OfferRows],
    *,
    step: LevelStep | None = None,
) -> OfferRows:
    """Chained offers of participants at or below their threshold that would still gain by
    shedding a unit at their cheapest contract's floor (the per-task simulator and the live
    nodes offer whenever a task is worth shedding at that floor, whatever the threshold):
    routed to the nearest participant that would take a unit even at its own lowest floor, so
    both ends gain at a price inside the chain's range. A participant that is the taker of one
    of the round's ``others`` offers does not smooth (no accepting while shedding)."""
    cap, scale, delta = fed.capacity, fed.scale, fed.hysteresis
    giver, _, pmin, pmax = fed.directed()
    floor = np.full(fed.size, np.inf)
    np.minimum.at(floor, giver, pmin)
    ceiling = np.full(fed.size, -np.inf)
    np.maximum.at(ceiling, giver, pmax)
    has_contract = np.isfinite(floor)
    at_floor = np.where(has_contract, floor, 1.0)
    wanting = has_contract & (load <= threshold) & (load > keep_level(cap, scale, at_floor + delta))
    wanting[direct] = False
    wanting[np.concatenate([row[1] for row in others] or [np.zeros(0, np.int64)])] = False
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    if not wanting.any():
        return empty_i, empty_i, empty_f, empty_i, empty_i, empty_i
    # Room is judged at the highest price a smoothing giver would pay (its saving on one unit
    # less the band, within its ranges), inside each participant's own range: that giver has a
    # deal with whichever end its route finds; a giver that would pay less than its end asks
    # makes no offer this round and finds nearer room as the dearer ones settle. (At the
    # floor, nobody has room once ranges are wide: no first unit costs less than a floor near
    # zero; at the lowest giver's price, hardly anyone.)
    shed = unit_cost(cap, scale, load.astype(np.float64)) - delta
    highest = float(np.minimum(shed, ceiling)[wanting].max())
    at_price = np.clip(highest, at_floor, np.where(has_contract, ceiling, 1.0))
    has_room = has_contract & (load < fill_level(cap, scale, at_price - delta)) & ~is_giver
    if not has_room.any():
        return empty_i, empty_i, empty_f, empty_i, empty_i, empty_i
    routes = route_to_room(fed, has_room, wanting, step=step)
    return _chained_rows(fed, load, routes, wanting)


def relay_offers(
    fed: LargeFederation,
    load: IntArray,
    is_giver: BoolArray,
    direct: IntArray,
    threshold: IntArray,
    p_room: FloatArray,
    *,
    step: LevelStep | None = None,
) -> OfferRows:
    """Chained offers of the participants above threshold that made no direct offer.

    ``threshold`` and ``p_room`` are ``thresholds(fed)`` and ``room_price(fed)`` (constant over
    a run); ``step`` runs ``route_to_room``'s levels elsewhere (the Spark job).
    """
    cap, scale, delta = fed.capacity, fed.scale, fed.hysteresis
    has_contract = ~np.isnan(p_room)
    fill_own = fill_level(cap, scale, np.where(has_contract, p_room, 0.0) - delta)
    has_room = has_contract & (load < fill_own) & ~is_giver
    stuck = has_contract & (load > threshold)
    stuck[direct] = False
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    if not stuck.any() or not has_room.any():
        return empty_i, empty_i, empty_f, empty_i, empty_i, empty_i
    routes = route_to_room(fed, has_room, stuck, step=step)
    return _chained_rows(fed, load, routes, stuck)


def _chained_rows(
    fed: LargeFederation, load: IntArray, routes: Routes, wanting: BoolArray
) -> OfferRows:
    """The chained offers of the ``wanting`` participants that have a route: priced by the
    negotiation over the chain's range, sized to the end's room at that price."""
    cap, scale, delta = fed.capacity, fed.scale, fed.hysteresis
    g = np.flatnonzero(wanting & (routes.dist >= 1))
    t = routes.end[g]
    out_g = unit_cost(cap[g], scale[g], load[g].astype(np.float64))
    in_t = unit_cost(cap[t], scale[t], load[t].astype(np.float64) + 1.0)
    negotiated = protocol.negotiated_prices(
        out_g - delta, in_t + delta, routes.low[g], routes.high[g]
    )
    deal = ~np.isnan(negotiated)
    price = np.where(deal, negotiated, 1.0)  # 1.0 only keeps the arithmetic finite: no offer
    offer = load[g] - np.minimum(keep_level(cap[g], scale[g], price + delta), load[g])
    room = fill_level(cap[t], scale[t], price - delta) - load[t]
    ok = deal & (offer >= 1) & (room >= 1)
    return g[ok], t[ok], price[ok], offer[ok], room[ok], routes.dist[g[ok]]


def apply_moves(load: IntArray, moves: RoundMoves, size: int) -> IntArray:
    delta = np.bincount(moves.taker, weights=moves.accepted, minlength=size)
    delta -= np.bincount(moves.giver, weights=moves.accepted, minlength=size)
    return load + delta.astype(np.int64)


# Plans one round from the loads at its start (``plan_round``, or the Spark job's).
Planner = Callable[[IntArray, bool], RoundMoves]


def run_rounds(
    fed: LargeFederation,
    *,
    max_rounds: int = 200,
    record_loads: bool = False,
    relays: bool = True,
    smooth: bool = True,
    plan: Planner | None = None,
    on_round: Callable[[RoundRecord, float], None] | None = None,
) -> RoundsResult:
    """Run rounds until no offer is made (a fixed point) or ``max_rounds``.

    ``plan`` replaces ``plan_round`` (the Spark job plans on its executors; everything else,
    the bookkeeping of one vector per participant, is this loop); ``on_round`` sees each round's
    record and its wall seconds. ``smooth`` adds ``smoothing_offers`` (a ``plan`` must have
    been built with the same choice).
    """
    threshold = thresholds(fed)
    load = fed.load.astype(np.int64).copy()
    records: list[RoundRecord] = []
    seconds: list[float] = []
    history: list[IntArray] = [load.copy()] if record_loads else []
    initial_cost = float(mm1_cost(fed.capacity, fed.scale, load.astype(np.float64)).sum())
    initial_ok = is_acceptable(load, threshold)
    above = int((load > threshold).sum())
    for r in range(1, max_rounds + 1):
        began = time.perf_counter()
        if plan is None:
            moves = plan_round(fed, load, relays=relays, smooth=smooth)
        else:
            # Only a participant above its threshold offers along a chain (or, smoothing, one
            # below it with something to shed at its floor): with none, the relay search is
            # skipped (it would find no one to route for).
            moves = plan(load, relays and (above > 0 or smooth))
        if moves.giver.size == 0:
            break
        load = apply_moves(load, moves, fed.size)
        if record_loads:
            history.append(load.copy())
        moved = moves.accepted > 0
        above = int((load > threshold).sum())
        record = RoundRecord(
            round=r,
            offers=int(moves.giver.size),
            moves=int(moved.sum()),
            units_moved=int(moves.accepted.sum()),
            payment_volume=float((moves.accepted * moves.price).sum()),
            cost=float(mm1_cost(fed.capacity, fed.scale, load.astype(np.float64)).sum()),
            above_threshold=above,
            acceptable=is_acceptable(load, threshold),
            relayed=int((moved & (moves.hops > 1)).sum()),
        )
        records.append(record)
        seconds.append(time.perf_counter() - began)
        if on_round is not None:
            on_round(record, seconds[-1])
    return RoundsResult(
        thresholds=threshold,
        final_load=load,
        rounds=tuple(records),
        loads=tuple(history),
        initial_cost=initial_cost,
        initial_acceptable=initial_ok,
        seconds_per_round=tuple(seconds),
    )


# --- bounds and generation ----------------------------------------------------------------------


def water_filling_bound(fed: LargeFederation, *, iterations: int = 200) -> float:
    """A lower bound on total cost: the best split of the total load ignoring the contract graph.

    Minimising sum D_i(x_i) subject to sum x_i = total and 0 <= x_i < C_i is convex; its optimum
    equalises marginal costs, D_i'(x_i) = s C / (C - x)^2 = lambda, so x_i = C - sqrt(s C /
    lambda) clipped at 0, and lambda is found by bisection. Any allocation over the contracts is
    feasible here, so this bounds every run from below (loosely: it also allows fractional load).
    """
    total = float(fed.load.sum())
    cap, scale = fed.capacity, fed.scale
    if total >= cap.sum():
        return float("inf")

    return _water_filled_cost(cap, scale, total, 0.0, np.inf, iterations)


def bounded_price_bound(fed: LargeFederation, *, iterations: int = 200) -> float:
    """A lower bound on the total cost any run of the mechanism can reach from ``fed.load``.

    Every move is individually rational at a price inside a contract's range (the Borealis
    poster's rule, "task t moves from A to B if unit MC task t > p at A and < p at B", with the
    band delta on both sides; contracts "fix or tightly bound price per unit-load", [p, p + e]).
    So participant i never sheds below K_i(p_floor + delta), p_floor
    the lowest price_min of its contracts, nor fills past F_i(p_ceiling - delta), p_ceiling the
    highest price_max: its final load lies in [min(L_i, K_i), max(L_i, F_i)]. The best split of
    the total load inside those boxes (water-filling with bounds, equal marginal costs where
    unclamped) bounds every run from below. Unlike ``water_filling_bound`` it charges the price
    ranges' own limits: with a fixed price a participant whose marginal cost is below the price
    can never hand load to an emptier one, however much both would gain at a lower price.
    """
    giver, _, pmin, pmax = fed.directed()
    n = fed.size
    floor = np.full(n, np.inf)
    np.minimum.at(floor, giver, pmin)
    ceiling = np.full(n, -np.inf)
    np.maximum.at(ceiling, giver, pmax)
    has = np.isfinite(floor)
    cap, scale, delta = fed.capacity, fed.scale, fed.hysteresis
    load = fed.load.astype(np.float64)
    keep = keep_level(cap, scale, np.where(has, floor, 1.0) + delta).astype(np.float64)
    fill = fill_level(cap, scale, np.where(has, ceiling, 0.0) - delta).astype(np.float64)
    low = np.where(has, np.minimum(load, keep), load)
    high = np.where(has, np.maximum(load, fill), load)
    total = float(load.sum())

    return _water_filled_cost(cap, scale, total, low, high, iterations)


def _water_filled_cost(
    cap: FloatArray,
    scale: FloatArray,
    total: float,
    low: FloatArray | float,
    high: FloatArray | float,
    iterations: int,
) -> float:
    """The M/M/1 cost of ``total`` load split at one marginal cost (bisection on it), each
    participant's share clipped to [low, high]."""
    _, share = _water_filled_split(cap, scale, total, low, high, iterations)
    return float(mm1_cost(cap, scale, share).sum())


def _water_filled_split(
    cap: FloatArray,
    scale: FloatArray,
    total: float,
    low: FloatArray | float,
    high: FloatArray | float,
    iterations: int,
) -> tuple[float, FloatArray]:
    """The common marginal cost lambda and each participant's share at it (clipped)."""

    def placed(lam: float) -> FloatArray:
        return np.clip(cap - np.sqrt(scale * cap / lam), low, high)

    lo, hi = 1e-12, 1.0
    while placed(hi).sum() < total:
        hi *= 2.0
    for _ in range(iterations):
        mid = (lo + hi) / 2.0
        if placed(mid).sum() < total:
            lo = mid
        else:
            hi = mid
    return hi, placed(hi)


def water_filling_split(fed: LargeFederation, *, iterations: int = 200) -> tuple[float, FloatArray]:
    """The optimum behind ``water_filling_bound``: its common marginal cost lambda and every
    participant's (fractional) load at it, for the diagnosis of what separates a run from it
    (``bench/whatif/gap.py``). Raises ``LargeFederationError`` when the load cannot fit."""
    total = float(fed.load.sum())
    if total >= fed.capacity.sum():
        raise LargeFederationError("load", "the total load does not fit the total capacity")
    return _water_filled_split(fed.capacity, fed.scale, total, 0.0, np.inf, iterations)


def generate_large(
    *,
    participants: int,
    contracts_per_participant: int,
    price_range_width: float = 0.1,
    load_skew: float = 1.0,
    capacity_spread: float = 0.3,
    utilisation: float = 0.7,
    seed: int = 0,
    hysteresis: float = 0.005,
    uneven: bool = False,
    price_centre: float = BASE_PRICE,
) -> LargeFederation:
    """A random federation in which every participant has exactly k contracts.

    The contract graph is a circulant: participant i contracts with i +- o for k // 2 offsets o
    drawn at random (1 is always one of them, so the graph is connected), plus i <-> i + n // 2
    for i < n // 2 when k is odd. An odd k needs an even n, unless ``uneven`` lets the last
    participant of an odd n have k - 1 (the quality benchmark's 995 participants).
    Participant attributes are drawn independently, so the regular labelling does not
    bias anything. Capacity is 100 x (1 + spread x U(-1, 1)); contracts are priced around
    BASE_PRICE with a relative range ``price_range_width``; the total load is ``utilisation`` times
    the total of thresholds, split with log-normal weights of sigma ``load_skew`` and capped
    below each capacity.

    ``price_centre`` moves the contracts' ranges to another centre (same relative width) while
    the loads stay those drawn at BASE_PRICE, so a seed gives the same participants and loads at
    every centre: what a planner compares when asking "what if our contracts were priced lower?"
    (the thresholds, derived from the prices, move with the centre).
    """
    n, k = participants, contracts_per_participant
    if n < 2:
        raise LargeFederationError("participants", f"needs at least 2, got {n}")
    if not 1 <= k <= n - 1:
        raise LargeFederationError(
            "contracts_per_participant", f"must be between 1 and participants - 1 = {n - 1}"
        )
    if k % 2 == 1 and n % 2 == 1 and not uneven:
        raise LargeFederationError(
            "contracts_per_participant", f"an odd k ({k}) needs an even number of participants"
        )
    if k // 2 > (n - 1) // 2:
        raise LargeFederationError("contracts_per_participant", f"too many for {n} participants")
    if not 0 <= price_range_width < 2:
        raise LargeFederationError("price_range_width", "must be in [0, 2)")
    if load_skew < 0:
        raise LargeFederationError("load_skew", "must be >= 0")
    if not 0 <= capacity_spread < 1:
        raise LargeFederationError("capacity_spread", "must be in [0, 1)")
    if not utilisation > 0:
        raise LargeFederationError("utilisation", "must be positive")
    if hysteresis < 0:
        raise LargeFederationError("hysteresis", "must be >= 0")
    if not price_centre > 0:
        raise LargeFederationError("price_centre", "must be positive")
    rng = np.random.default_rng(seed)
    capacity = 100.0 * (1.0 + capacity_spread * rng.uniform(-1.0, 1.0, n))
    scale = np.ones(n)

    half = k // 2
    others = np.arange(2, (n - 1) // 2 + 1)
    if k % 2 == 1:
        # The matching below pairs i with i + n // 2: that offset must not be drawn again.
        others = others[others != n // 2]
    drawn = rng.choice(others, size=half - 1, replace=False) if half >= 2 else others[:0]
    offsets = np.concatenate([[1], drawn])[:half].astype(np.int64)
    ids = np.arange(n, dtype=np.int64)
    a_parts = [ids for _ in offsets]
    b_parts = [(ids + int(o)) % n for o in offsets]
    if k % 2 == 1:
        a_parts.append(ids[: n // 2])
        b_parts.append(ids[: n // 2] + n // 2)
    edge_a = np.concatenate(a_parts) if a_parts else np.zeros(0, np.int64)
    edge_b = np.concatenate(b_parts) if b_parts else np.zeros(0, np.int64)
    lo, hi = np.minimum(edge_a, edge_b), np.maximum(edge_a, edge_b)
    pmin = np.full(lo.size, BASE_PRICE * (1.0 - price_range_width / 2.0))
    pmax = np.full(lo.size, BASE_PRICE * (1.0 + price_range_width / 2.0))

    draft = LargeFederation(capacity, scale, np.zeros(n, np.int64), lo, hi, pmin, pmax, hysteresis)
    total = utilisation * float(thresholds(draft).sum())
    weights = np.exp(load_skew * rng.standard_normal(n))
    ceiling = (np.ceil(capacity) - 1.0).astype(np.int64)
    load = np.minimum(np.floor(total * weights / weights.sum()).astype(np.int64), ceiling)
    if price_centre != BASE_PRICE:
        pmin = np.full(lo.size, price_centre * (1.0 - price_range_width / 2.0))
        pmax = np.full(lo.size, price_centre * (1.0 + price_range_width / 2.0))
    return LargeFederation(capacity, scale, load, lo, hi, pmin, pmax, hysteresis)
