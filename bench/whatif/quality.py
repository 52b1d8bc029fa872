"""The quality table of the round algorithm: fraction acceptable and cost against the bound.

PYTHONPATH=. .venv/bin/python -m bench.whatif.quality [--participants 995] [--seeds 20]
    [--k 1 2 3 ...] [--widths 0 0.05 0.1 0.15 0.2] [--no-relays] [--no-smoothing] [--json FILE]

Random underloaded federations (``app.market.rounds.generate_large``: load skew 1, capacity
spread 0.3, total load 70% of the thresholds), one per seed and cell, run to a fixed point with
``run_rounds``. Per cell: the fraction that ends acceptable and the median ratio of the final
total cost to the water-filling lower bound (``water_filling_bound``). ``--no-relays`` runs the
mechanism without chained moves (the algorithm before this benchmark), to attribute the change;
``--no-smoothing`` without the chains of participants below their thresholds.
Figures and the machine's load go in ``bench/whatif/README.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

from app.market.rounds import (
    BASE_PRICE,
    LargeFederation,
    bounded_price_bound,
    generate_large,
    run_rounds,
    water_filling_bound,
)


def quality_federation(
    participants: int, k: int, width: float, seed: int, centre: float = BASE_PRICE
) -> LargeFederation:
    """One of the quality table's random underloaded federations (also ``gap.py``'s)."""
    return generate_large(
        participants=participants,
        contracts_per_participant=k,
        price_range_width=width,
        load_skew=1.0,
        capacity_spread=0.3,
        utilisation=0.7,
        seed=seed,
        uneven=True,
        price_centre=centre,
    )


def cell(
    participants: int,
    k: int,
    width: float,
    seeds: int,
    relays: bool,
    smooth: bool = True,
    price_centre: float = BASE_PRICE,
) -> dict[str, float | int | None]:
    acceptable = 0
    ratios: list[float] = []
    bounded: list[float] = []
    rounds: list[int] = []
    for seed in range(seeds):
        fed = quality_federation(participants, k, width, seed, price_centre)
        result = run_rounds(fed, max_rounds=500, relays=relays, smooth=smooth)
        acceptable += result.acceptable
        cost = result.rounds[-1].cost if result.rounds else result.initial_cost
        ratios.append(cost / water_filling_bound(fed))
        bounded.append(cost / bounded_price_bound(fed))
        rounds.append(len(result.rounds))
    finite = [r for r in ratios if math.isfinite(r)]
    return {
        "k": k,
        "width": width,
        "runs": seeds,
        "fraction_acceptable": acceptable / seeds,
        "median_cost_ratio": statistics.median(ratios) if len(finite) == len(ratios) else None,
        "median_bounded_ratio": statistics.median(bounded) if len(finite) == len(ratios) else None,
        "median_rounds": statistics.median(rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--participants", type=int, default=995)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--k", type=int, nargs="+", default=list(range(1, 11)))
    parser.add_argument("--widths", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.15, 0.2])
    parser.add_argument("--no-relays", action="store_true")
    parser.add_argument("--no-smoothing", action="store_true")
    parser.add_argument(
        "--price-centre",
        type=float,
        default=BASE_PRICE,
        help=f"centre of the contracts' price ranges (default {BASE_PRICE}: the thresholds' "
        "marginal cost)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    rows = [
        cell(
            args.participants,
            k,
            width,
            args.seeds,
            not args.no_relays,
            not args.no_smoothing,
            args.price_centre,
        )
        for width in args.widths
        for k in args.k
    ]
    print(
        f"{args.participants} participants, {args.seeds} seeds per cell, prices centred at "
        f"{args.price_centre}, relays: "
        f"{not args.no_relays}; load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}; "
        f"{time.perf_counter() - began:.0f} s"
    )
    header = " | ".join(str(k) for k in args.k)
    print(f"| width \\ k | {header} |")
    print("| --- |" + " --- |" * len(args.k))
    for width in args.widths:
        cells = [r for r in rows if r["width"] == width]
        text = " | ".join(f"{r['fraction_acceptable']:.2f}" for r in cells)
        print(f"| {width:.0%} | {text} |")
    print("\nmedian final cost / water-filling bound")
    print(f"| width \\ k | {header} |")
    print("| --- |" + " --- |" * len(args.k))
    for width in args.widths:
        cells = [r for r in rows if r["width"] == width]
        text = " | ".join(
            "inf" if r["median_cost_ratio"] is None else f"{r['median_cost_ratio']:.2f}"
            for r in cells
        )
        print(f"| {width:.0%} | {text} |")
    print("\nmedian final cost / bounded-price bound (the best any run within the ranges can do)")
    print(f"| width \\ k | {header} |")
    print("| --- |" + " --- |" * len(args.k))
    for width in args.widths:
        cells = [r for r in rows if r["width"] == width]
        text = " | ".join(
            "inf" if r["median_bounded_ratio"] is None else f"{r['median_bounded_ratio']:.2f}"
            for r in cells
        )
        print(f"| {width:.0%} | {text} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
