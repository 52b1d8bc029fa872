"""The what-if job's three runs (one federation, a sweep, one very large federation) and their
outputs: DIR/summary.json, PNG plots, DIR/report.html, and for a sweep DIR/results.parquet.

Only this module and ``command.py`` read and write files; the simulation code paths are pure
(``app/market``) or pure Spark transformations (``sweep.py``, ``large.py``).
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from app.federation.document import FederationDoc
from app.market.rounds import (
    LargeFederation,
    bounded_price_bound,
    generate_large,
    judge_state,
    participant_names,
    water_filling_bound,
)
from app.market.simulator import SimulationResult, simulate, verdict_line
from spark_jobs.whatif import plots
from spark_jobs.whatif.report import write_report, write_summary
from spark_jobs.whatif.story import DEMO_DIFFERENCES, acts, demo_comparison
from spark_jobs.whatif.sweep import FIGURES, run_in_process, run_on_spark
from spark_jobs.whatif.sweep_file import GridSweep, LargeSweep


def _progress(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


@contextmanager
def _spark(master: str | None, app_name: str, shuffle_partitions: int) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from spark_jobs.session import build_session

    # A session someone else started (a warm one in the tests, a notebook's) is theirs to stop.
    borrowed = SparkSession.getActiveSession() is not None
    session = build_session(app_name=app_name, master=master, shuffle_partitions=shuffle_partitions)
    try:
        yield session
    finally:
        if not borrowed:
            session.stop()


# --- one federation ------------------------------------------------------------------------------


def run_federation(
    doc: FederationDoc, out: Path, *, max_steps: int | None, console: Console
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    with _progress(console) as progress:
        task = progress.add_task(f"simulating {doc.name}", total=1)
        result = simulate(doc, max_steps=max_steps)
        progress.update(task, completed=1)
    summary = {
        **result.summary(),
        "kind": "federation",
        "federation": doc.name,
        "source": doc.source,
        "steps": len(result.trace),
        "wall_seconds": time.perf_counter() - began,
    }
    summary.setdefault("seconds_to_acceptable", result.seconds_to_acceptable)
    write_summary(out, summary)
    pngs = plots.federation_plots(out, doc, result)
    moves = pd.DataFrame([m.as_dict() for m in result.move_log[:200]])
    story = acts(doc, result)
    claims = demo_comparison(doc, story)
    write_report(
        out,
        title=doc.name,
        description=doc.description,
        source=doc.source,
        kind="one federation (per-task simulator)",
        verdict=result.verdict,
        acceptable=result.acceptable,
        reasons=result.reasons,
        notes=federation_notes(summary),
        story=story,
        claims=claims,
        claims_note=DEMO_DIFFERENCES
        + (
            ""
            if all(c.holds for c in claims)
            else " Where a claim does not hold, the verdict above and the acts say why."
        ),
        figures=summary,
        plots=pngs,
        tables=[
            ("Participants at the end", participants_table(result)),
            (f"Moves (first {len(moves)} of {len(result.move_log)})", moves),
        ],
    )
    return summary


def federation_notes(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The comparison with the lower bound, and why a cost or the bound is infinite."""
    cost, bound, ratio = summary["cost"], summary["cost_lower_bound"], summary["cost_ratio"]
    notes = []
    if cost is not None and bound is not None:
        versus = f" ({ratio:.2f}x the bound)" if ratio is not None else ""
        notes.append(
            (
                "cost vs lower bound",
                f"final cost {cost:.4g} against {bound:.4g}{versus}. The bound is the best any "
                "allocation could do with divisible tasks moving freely along the contracts "
                "(the continuous relaxation); whole tasks and the prices' limits keep the "
                "market above it.",
            )
        )
    if summary.get("cost_note"):
        notes.append(("cost", str(summary["cost_note"])))
    if summary.get("cost_lower_bound_note"):
        notes.append(("lower bound", str(summary["cost_lower_bound_note"])))
    return notes


def participants_table(result: SimulationResult) -> pd.DataFrame:
    rows = []
    for name, load in result.final_load.items():
        threshold = result.thresholds.get(name, math.nan)
        rows.append(
            {
                "participant": name,
                "final load": load,
                "threshold": threshold,
                "over threshold": load > threshold + 1e-9,
                "net payment": result.net_payments.get(name, 0.0),
            }
        )
    return pd.DataFrame(rows)


# --- sweeps --------------------------------------------------------------------------------------


def sweep_summary(sweep: GridSweep, results: pd.DataFrame, wall: float) -> dict[str, Any]:
    ok = results[results["error"].isna()]
    reached = ok["steps_to_acceptable"].dropna()
    seconds = ok["seconds_to_acceptable"].dropna()
    ratios = ok["cost_ratio"].dropna()

    def mean(column: str) -> float | None:
        # Over finite values: one run ending with a node past capacity (infinite M/M/1 cost)
        # would otherwise make the mean infinite; such runs are counted separately.
        values = pd.to_numeric(ok[column], errors="coerce").astype(float)
        values = values[np.isfinite(values)]
        return float(values.mean()) if len(values) else None

    acceptable = ok["acceptable"].astype(bool)
    failing = ok[~acceptable]
    fraction = float(acceptable.mean()) if len(ok) else None
    why_not = (
        [f"{len(failing)} of {len(results)} runs did not end in an acceptable allocation"]
        + [
            f"run {int(row['id'])} (seed {int(row['seed'])}): {row['why_not_acceptable']}"
            for _, row in failing.head(3).iterrows()
        ]
        if len(failing)
        else []
    )
    return {
        "kind": "sweep",
        "sweep": sweep.name,
        "source": sweep.source,
        "runs": len(results),
        "errors": int(results["error"].notna().sum()),
        # A sweep answers "how often", never yes or no: 91% acceptable is not "no".
        "verdict": sweep_verdict(int(acceptable.sum()), len(ok), len(results)),
        "fraction_acceptable": fraction,
        "acceptable_runs": int(acceptable.sum()),
        # The single-federation keys, as aggregates over the runs: medians over the runs that
        # reached an acceptable allocation; means elsewhere.
        "why_not_acceptable": why_not,
        "steps_to_acceptable": float(statistics.median(reached)) if len(reached) else None,
        "seconds_to_acceptable": float(statistics.median(seconds)) if len(seconds) else None,
        "moves": mean("moves"),
        "payments_total": mean("payments_total"),
        "cost": mean("cost"),
        "cost_lower_bound": mean("cost_lower_bound"),
        "cost_ratio_median": float(ratios.median()) if len(ratios) else None,
        "runs_with_infinite_cost": int((~np.isfinite(ok["cost"].astype(float))).sum()),
        # Per-participant figures belong to one federation; a sweep has thousands of them.
        "final_load": {},
        "thresholds": {},
        "groups": group_table(results).to_dict("records"),
        "wall_seconds": wall,
        "simulations_per_second": len(results) / wall if wall > 0 else None,
    }


def sweep_verdict(acceptable: int, finished: int, runs: int) -> str:
    """One line: the fraction of finished runs ending acceptable, and failed runs if any."""
    failed = runs - finished
    tail = f"; {failed} of {runs} simulations failed" if failed else ""
    if not finished:
        return f"no simulation finished{tail}"
    return (
        f"acceptable in {acceptable / finished:.1%} of runs ({acceptable} of {finished} ended "
        f"in an acceptable allocation){tail}"
    )


def group_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per parameter combination (seeds pooled): runs, fraction acceptable, medians."""
    keys = [
        "participants",
        "contracts_per_participant",
        "price_range_width",
        "load_skew",
        "capacity_spread",
        "tasks_per_participant",
        "overload",
    ]
    frame = results.copy()
    frame["acceptable"] = frame["acceptable"].astype("Float64")
    for column in ("steps_to_acceptable", "cost_ratio"):
        frame[column] = pd.to_numeric(frame[column].astype("Float64"), errors="coerce")
    grouped = frame.groupby(keys, sort=True)
    with warnings.catch_warnings():  # a group where no run got there has no median: NaN is right
        warnings.simplefilter("ignore", RuntimeWarning)
        table = pd.DataFrame(
            {
                "runs": grouped.size(),
                "fraction_acceptable": grouped["acceptable"].mean(),
                "median_steps_to_acceptable": grouped["steps_to_acceptable"].median(),
                "median_cost_ratio": grouped["cost_ratio"].median(),
            }
        ).reset_index()
    return table.astype(object).where(table.notna(), None)


def run_sweep(
    sweep: GridSweep,
    out: Path,
    *,
    console: Console,
    master: str | None = None,
    in_process: bool = False,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    where = "one Python process" if in_process else "Spark"
    with _progress(console) as progress:
        task = progress.add_task(
            f"{sweep.name}: {sweep.size} simulations on {where}", total=sweep.size
        )

        def advance(done: int) -> None:
            progress.update(task, completed=done)

        began = time.perf_counter()
        if in_process:
            results = run_in_process(sweep, advance)
        else:
            with _spark(master, "fedload-whatif-sweep", 4) as spark:
                results = run_on_spark(spark, sweep, advance)
        wall = time.perf_counter() - began
    results.to_parquet(out / "results.parquet", index=False)
    summary = sweep_summary(sweep, results, wall)
    write_summary(out, summary)
    pngs = plots.sweep_plots(out, results) if summary["errors"] < len(results) else []
    write_report(
        out,
        title=sweep.name,
        description=sweep.description,
        source=sweep.source,
        kind=f"sweep of {sweep.size} generated federations ({where})",
        verdict=summary["verdict"],
        acceptable=None,
        reasons=summary["why_not_acceptable"],
        figures={k: v for k, v in summary.items() if k != "groups"},
        plots=pngs,
        tables=[("Per parameter combination (seeds pooled)", group_table(results))],
    )
    return summary


# --- the very large federation -------------------------------------------------------------------

OFFER_INTERVAL_SECONDS = 7.0  # Borealis: offers examined every 7 s; one round is one interval.


def run_large(
    spec: LargeSweep,
    out: Path,
    *,
    console: Console,
    master: str | None = None,
    fed: LargeFederation | None = None,
    names: list[str] | None = None,
) -> dict[str, Any]:
    """One large federation in rounds on Spark: ``fed`` (read from a planner's input, with its
    participants' ``names``) or, without it, the one ``spec`` generates."""
    from spark_jobs.whatif.large import run_rounds

    if fed is None:
        fed = generate_large(
            participants=spec.participants,
            contracts_per_participant=spec.contracts_per_participant,
            price_range_width=spec.price_range_width,
            load_skew=spec.load_skew,
            capacity_spread=spec.capacity_spread,
            utilisation=spec.utilisation,
            seed=spec.seed,
        )
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    with _spark(master, "fedload-whatif-large", 8) as spark, _progress(console) as progress:
        task = progress.add_task(
            f"{spec.participants:,} participants, k = {spec.contracts_per_participant}: rounds",
            total=spec.max_rounds,
        )

        def advance(record: Any, seconds: float) -> None:
            progress.update(
                task,
                completed=record.round,
                description=f"round {record.round}: {record.above_threshold:,} above threshold, "
                f"{record.units_moved:,} units moved ({seconds:.1f} s)",
            )

        result = run_rounds(spark, fed, max_rounds=spec.max_rounds, on_round=advance)
        progress.update(task, total=max(len(result.rounds), 1), completed=len(result.rounds))
    wall = time.perf_counter() - began
    final_load = result.final_load
    final_threshold = result.thresholds
    names = names or participant_names(spec.participants)
    # The one acceptability rule on the final state, with the contract graph to say why not.
    verdict = judge_state(fed, final_load, final_threshold, names=names)
    bound = water_filling_bound(fed)
    rounds = result.rounds
    last = len(rounds)
    # Moved load is paid its price per second from its move to the end of the run (an estimate:
    # the round model does not follow a unit that moves again).
    payments = sum(r.payment_volume * (last - r.round + 1) * OFFER_INTERVAL_SECONDS for r in rounds)
    reached = result.rounds_to_acceptable
    cost = rounds[-1].cost if rounds else result.initial_cost
    summary = {
        "kind": "large",
        "sweep": spec.name,
        "source": spec.source,
        "participants": spec.participants,
        "contracts": int(fed.edge_a.size),
        "parameters": {
            "contracts_per_participant": spec.contracts_per_participant,
            "price_range_width": spec.price_range_width,
            "load_skew": spec.load_skew,
            "capacity_spread": spec.capacity_spread,
            "utilisation": spec.utilisation,
            "seed": spec.seed,
            "max_rounds": spec.max_rounds,
        },
        "verdict": verdict_line(verdict),
        "acceptable": verdict.acceptable,
        "why_not_acceptable": list(verdict.reasons),
        "steps_to_acceptable": reached,
        "seconds_to_acceptable": None if reached is None else reached * OFFER_INTERVAL_SECONDS,
        "rounds": last,
        "moves": int(sum(r.moves for r in rounds)),
        "units_moved": int(sum(r.units_moved for r in rounds)),
        "payments_total": payments,
        "initial_cost": result.initial_cost,
        "cost": cost,
        "cost_lower_bound": bound,
        "cost_ratio": cost / bound if bound and math.isfinite(bound) else None,
        # The best any run inside the contracts' price ranges can reach (rounds.py).
        "cost_bounded_price_bound": bounded_price_bound(fed),
        "seconds_per_round": result.seconds_per_round,
        "wall_seconds": wall,
        "per_round": [vars(r) for r in rounds],
        "final_load": dict(zip(names, (int(v) for v in final_load), strict=True)),
        "thresholds": dict(zip(names, (int(v) for v in final_threshold), strict=True)),
    }
    write_summary(out, summary)
    pngs = plots.large_plots(
        out, rounds, result.initial_cost, bound, fed.capacity, fed.load, final_load
    )
    shown = {k: v for k, v in summary.items() if k not in ("per_round", "seconds_per_round")}
    write_report(
        out,
        title=f"{spec.name}: {spec.participants:,} participants",
        description=spec.description
        or "One very large generated federation, simulated in rounds with Spark DataFrames.",
        source=spec.source,
        kind="very large federation (Spark DataFrame rounds)",
        verdict=verdict_line(verdict)
        + f" (after {last} rounds"
        + (f"; first acceptable at round {reached})" if reached is not None else ")"),
        acceptable=verdict.acceptable,
        reasons=verdict.reasons,
        figures=shown,
        plots=pngs,
        tables=[("Per round", pd.DataFrame(summary["per_round"]))],
    )
    return summary


__all__ = ["FIGURES", "run_federation", "run_large", "run_sweep"]
