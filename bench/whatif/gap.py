"""What separates the round algorithm's final allocation from the continuous optimum.

PYTHONPATH=. .venv/bin/python -m bench.whatif.gap [--participants 995] [--seeds 10] [--k 3]
    [--widths 0 0.1 0.2] [--table-widths ...] [--table-centres ...] [--no-smoothing]
    [--json FILE]

Part 1, the diagnosis (per k and width, over ``--seeds`` federations of ``generate_large``, the
quality benchmark's generator). The gap, final cost minus the water-filling bound, is split
exactly into one non-negative share per participant,

    g_i = D_i(f_i) - D_i(x_i) - lambda (f_i - x_i)

(f the final loads, x the continuous optimum, lambda its common marginal cost; the shares sum to
the gap because sum f = sum x, and each is >= 0 by convexity). Participants are classed by
where they end against lambda and what the contracts still let them do:

- above lambda and *locked*: their marginal cost u(f) is at most every contract's floor plus the
  band, so no price inside their ranges pays them to shed another unit;
- above lambda, could still shed at some contract price;
- below lambda, could still take at some contract price (u(f + 1) + band < a ceiling);
- below lambda, could not.

and by what they did (shed, took, untouched). It also checks whether any move that both sides
would accept at a price inside the ranges is left at the end: directly on a contract, and along
any chain of contracts (the generator's ranges are all equal, so a chain's range is that range).
``bounded_price_bound`` gives the share of the gap no run inside the ranges can close.

Part 2, the table by price-range width and centre (``--table-widths``, ``--table-centres``; the
same seeds' participants and loads at every centre, ``generate_large(price_centre=...)``): the
fraction acceptable and the median final cost over the continuous bound, so the team can see
which ranges reach 1.2x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from app.market.rounds import (
    BASE_PRICE,
    LargeFederation,
    bounded_price_bound,
    edge_offers,
    mm1_cost,
    run_rounds,
    unit_cost,
    water_filling_bound,
    water_filling_split,
)
from bench.whatif.quality import quality_federation

CLASSES = ("above_locked", "above_free", "below_can_take", "below_cannot_take")
ROLES = ("shed", "took", "untouched")


@dataclass(frozen=True)
class Diagnosis:
    final_cost: float
    bound: float
    bounded_bound: float
    lam: float
    acceptable: bool
    # Gap share and participant count per class x role ("above_locked/shed", ...).
    share: dict[str, float]
    count: dict[str, int]
    # Mean unit marginal cost u(f) at the end per class.
    mean_mc: dict[str, float]
    direct_moves_left: int
    chain_givers_left: int
    best_chain_gain: float


def _floors_and_ceilings(fed: LargeFederation) -> tuple[np.ndarray, np.ndarray]:
    giver, _, pmin, pmax = fed.directed()
    floor = np.full(fed.size, np.inf)
    np.minimum.at(floor, giver, pmin)
    ceiling = np.full(fed.size, -np.inf)
    np.maximum.at(ceiling, giver, pmax)
    return floor, ceiling


def _chain_moves_left(
    fed: LargeFederation, shed: np.ndarray, take: np.ndarray
) -> tuple[int, float]:
    """Participants that could still hand a unit along some chain to a participant that would
    take it at one price inside the (equal) ranges, and the largest per-unit gain among them."""
    pmin, pmax = float(fed.price_min.min()), float(fed.price_max.max())
    if fed.price_min.size and (fed.price_min.max() != pmin or fed.price_max.min() != pmax):
        raise ValueError("the chain check assumes every contract has the same range")
    n = fed.size
    graph = coo_matrix((np.ones(fed.edge_a.size), (fed.edge_a, fed.edge_b)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    # A price p in [pmin, pmax] with take_j < p < shed_i: the open and closed intervals meet.
    can_give = shed > pmin
    can_take = take < pmax
    givers = 0
    best = 0.0
    for component in np.unique(label):
        members = np.flatnonzero(label == component)
        takers = members[can_take[members]]
        if takers.size == 0:
            continue
        order = np.argsort(take[takers])
        lowest = takers[order[0]]
        second = take[takers[order[1]]] if takers.size > 1 else np.inf
        for i in members[can_give[members]]:
            cheapest = second if i == lowest else take[lowest]
            if cheapest < shed[i]:
                givers += 1
                best = max(best, float(min(shed[i], pmax) - max(cheapest, pmin)))
    return givers, best


def diagnose(fed: LargeFederation, smooth: bool = True) -> Diagnosis:
    result = run_rounds(fed, max_rounds=500, smooth=smooth)
    final = result.final_load.astype(np.float64)
    start = fed.load.astype(np.float64)
    cap, scale, delta = fed.capacity, fed.scale, fed.hysteresis
    lam, x = water_filling_split(fed)
    bound = water_filling_bound(fed)
    shares = mm1_cost(cap, scale, final) - mm1_cost(cap, scale, x) - lam * (final - x)
    mc = unit_cost(cap, scale, final)
    shed = mc - delta
    take = unit_cost(cap, scale, final + 1.0) + delta
    floor, ceiling = _floors_and_ceilings(fed)
    above = final > x
    klass = np.where(
        above,
        np.where(shed <= floor, 0, 1),
        np.where(take < ceiling, 2, 3),
    )
    role = np.where(final < start, 0, np.where(final > start, 1, 2))
    share: dict[str, float] = {}
    count: dict[str, int] = {}
    mean_mc: dict[str, float] = {}
    for c, cname in enumerate(CLASSES):
        in_class = klass == c
        mean_mc[cname] = float(mc[in_class].mean()) if in_class.any() else float("nan")
        for r, rname in enumerate(ROLES):
            picked = in_class & (role == r)
            share[f"{cname}/{rname}"] = float(shares[picked].sum())
            count[f"{cname}/{rname}"] = int(picked.sum())
    giver, taker, pmin, pmax = fed.directed()
    offers = edge_offers(cap, scale, result.final_load, delta, giver, taker, pmin, pmax)
    chain_givers, best = _chain_moves_left(fed, shed, take)
    final_cost = float(mm1_cost(cap, scale, final).sum())
    return Diagnosis(
        final_cost=final_cost,
        bound=bound,
        bounded_bound=bounded_price_bound(fed),
        lam=lam,
        acceptable=result.acceptable,
        share=share,
        count=count,
        mean_mc=mean_mc,
        direct_moves_left=int(offers.candidate.sum()),
        chain_givers_left=chain_givers,
        best_chain_gain=best,
    )


def diagnosis_cell(
    participants: int, k: int, width: float, seeds: int, smooth: bool
) -> dict[str, Any]:
    runs = [
        diagnose(quality_federation(participants, k, width, seed), smooth) for seed in range(seeds)
    ]
    gap = sum(r.final_cost - r.bound for r in runs)
    share = {key: sum(r.share[key] for r in runs) / gap for key in runs[0].share}
    count = {key: sum(r.count[key] for r in runs) / seeds for key in runs[0].count}
    mean_mc = {
        c: statistics.fmean(r.mean_mc[c] for r in runs if np.isfinite(r.mean_mc[c]))
        if any(np.isfinite(r.mean_mc[c]) for r in runs)
        else float("nan")
        for c in CLASSES
    }
    return {
        "k": k,
        "width": width,
        "smooth": smooth,
        "runs": seeds,
        "fraction_acceptable": sum(r.acceptable for r in runs) / seeds,
        "median_cost_ratio": statistics.median(r.final_cost / r.bound for r in runs),
        "median_bounded_ratio": statistics.median(r.final_cost / r.bounded_bound for r in runs),
        # The part of the gap no run inside the ranges can close.
        "gap_fraction_price_bounds": sum(r.bounded_bound - r.bound for r in runs) / gap,
        "lambda_median": statistics.median(r.lam for r in runs),
        "gap_share": share,
        "mean_count": count,
        "mean_mc": mean_mc,
        "direct_moves_left": sum(r.direct_moves_left for r in runs),
        "chain_givers_left": sum(r.chain_givers_left for r in runs),
        "best_chain_gain": max(r.best_chain_gain for r in runs),
        "gap_residual": abs(sum(sum(r.share.values()) for r in runs) - gap) / gap,
        "runs_detail": [asdict(r) for r in runs],
    }


def table_cell(
    participants: int, k: int, width: float, centre: float, seeds: int, smooth: bool
) -> dict[str, Any]:
    ratios: list[float] = []
    acceptable = 0
    for seed in range(seeds):
        fed = quality_federation(participants, k, width, seed, centre)
        result = run_rounds(fed, max_rounds=500, smooth=smooth)
        cost = result.rounds[-1].cost if result.rounds else result.initial_cost
        ratios.append(cost / water_filling_bound(fed))
        acceptable += result.acceptable
    return {
        "k": k,
        "width": width,
        "centre": centre,
        "runs": seeds,
        "fraction_acceptable": acceptable / seeds,
        "median_cost_ratio": statistics.median(ratios),
    }


def _print_diagnosis(cell: dict[str, Any]) -> None:
    print(
        f"\nk = {cell['k']}, width {cell['width']:.0%}: acceptable "
        f"{cell['fraction_acceptable']:.2f},"
        f" cost / continuous bound {cell['median_cost_ratio']:.3f}, / bounded-price bound "
        f"{cell['median_bounded_ratio']:.3f}, lambda {cell['lambda_median']:.4f}; share of the gap"
        f" no run inside the ranges can close: {cell['gap_fraction_price_bounds']:.1%}"
    )
    print(
        f"moves left at the end: direct {cell['direct_moves_left']}, participants with a chained "
        f"move {cell['chain_givers_left']} (best gain per unit {cell['best_chain_gain']:.4f});"
        f" decomposition residual {cell['gap_residual']:.1e}"
    )
    print("| class | mean u(f) | " + " | ".join(f"{r}: n, gap share" for r in ROLES) + " |")
    print("| --- | --- |" + " --- |" * len(ROLES))
    for c in CLASSES:
        parts = [
            f"{cell['mean_count'][f'{c}/{r}']:.0f}, {cell['gap_share'][f'{c}/{r}']:.1%}"
            for r in ROLES
        ]
        print(f"| {c} | {cell['mean_mc'][c]:.3f} | " + " | ".join(parts) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--participants", type=int, default=995)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--k", type=int, nargs="+", default=[3])
    parser.add_argument("--widths", type=float, nargs="*", default=[0.0, 0.1, 0.2])
    parser.add_argument("--table-widths", type=float, nargs="*", default=[])
    parser.add_argument("--table-centres", type=float, nargs="*", default=[BASE_PRICE])
    parser.add_argument(
        "--no-smoothing",
        action="store_true",
        help="rounds without smoothing chains (rounds.smoothing_offers), to attribute them",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    cells = [
        diagnosis_cell(args.participants, k, width, args.seeds, not args.no_smoothing)
        for k in args.k
        for width in args.widths
    ]
    for cell in cells:
        _print_diagnosis(cell)
    table = [
        table_cell(args.participants, k, width, centre, args.seeds, not args.no_smoothing)
        for k in args.k
        for centre in args.table_centres
        for width in args.table_widths
    ]
    if table:
        print("\nfraction acceptable, median cost / continuous bound, by centre and width")
        print("| k | centre | " + " | ".join(f"{w:.0%}" for w in args.table_widths) + " |")
        print("| --- | --- |" + " --- |" * len(args.table_widths))
        for k in args.k:
            for centre in args.table_centres:
                row = [c for c in table if c["k"] == k and c["centre"] == centre]
                text = " | ".join(
                    f"{c['fraction_acceptable']:.2f}, {c['median_cost_ratio']:.2f}" for c in row
                )
                print(f"| {k} | {centre:g} | {text} |")
    print(
        f"\n{args.participants} participants, {args.seeds} seeds per cell, smoothing "
        f"{not args.no_smoothing}; load average "
        f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}; {time.perf_counter() - began:.0f} s"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"diagnosis": cells, "table": table}, handle, indent=1)


if __name__ == "__main__":
    main()
