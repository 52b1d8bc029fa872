"""PNG plots of what-if runs (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from app.federation.document import FederationDoc
from app.market.cost_models import build_cost_model
from app.market.rounds import RoundRecord
from app.market.simulator import SimulationResult

DPI = 110


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# --- one federation --------------------------------------------------------------------------


def federation_plots(directory: Path, doc: FederationDoc, result: SimulationResult) -> list[Path]:
    return [
        _loads_over_time(directory / "loads.png", doc, result),
        _marginal_costs(directory / "marginal_costs.png", result),
        _cost_vs_bound(directory / "cost_vs_bound.png", doc, result),
    ]


def _timeline_marks(ax: plt.Axes, doc: FederationDoc) -> None:
    for event in doc.timeline:
        ax.axvline(event.at, color="grey", linewidth=0.6, linestyle=":")
        label = f"{event.event} {event.participant or event.task or ''}".strip()
        ax.annotate(
            label,
            (event.at, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            rotation=90,
            va="top",
            ha="right",
            color="grey",
        )


def _loads_over_time(path: Path, doc: FederationDoc, result: SimulationResult) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    times = [step.t for step in result.trace]
    names = [p.name for p in doc.participants]
    for name in names:
        (line,) = ax.plot(
            times, [step.loads.get(name, math.nan) for step in result.trace], label=f"{name}"
        )
        threshold = result.thresholds.get(name)
        if threshold is not None and math.isfinite(threshold):
            ax.axhline(threshold, color=line.get_color(), linestyle="--", linewidth=0.8)
    _timeline_marks(ax, doc)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("load (units)")
    ax.set_title("Load per participant over time (dashed: capacity threshold)")
    ax.legend(fontsize=7, ncol=min(len(names), 6))
    return _save(fig, path)


def _marginal_costs(path: Path, result: SimulationResult) -> Path:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    times = [step.t for step in result.trace]
    names = sorted({n for step in result.trace for n in step.marginal_costs})
    for name in names:
        values = [step.marginal_costs.get(name, math.nan) for step in result.trace]
        ax.plot(times, [v if math.isfinite(v) else math.nan for v in values], label=name)
    ax.set_yscale("log")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("marginal cost per unit load")
    ax.set_title("Marginal cost per participant (gaps: at or past capacity)")
    if names:
        ax.legend(fontsize=7, ncol=min(len(names), 6))
    return _save(fig, path)


def total_cost_series(doc: FederationDoc, result: SimulationResult) -> list[float]:
    models = {p.name: build_cost_model(p.cost_model, p.capacity) for p in doc.participants}
    return [
        sum(models[n].cost(load) for n, load in step.loads.items() if n in models)
        for step in result.trace
    ]


def _cost_vs_bound(path: Path, doc: FederationDoc, result: SimulationResult) -> Path:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    times = [step.t for step in result.trace]
    costs = [c if math.isfinite(c) else math.nan for c in total_cost_series(doc, result)]
    ax.plot(times, costs, label="total cost of the allocation")
    if math.isfinite(result.cost_lower_bound):
        ax.axhline(
            result.cost_lower_bound,
            color="black",
            linestyle="--",
            linewidth=0.9,
            label=f"lower bound at the final load ({result.cost_lower_bound:.3g})",
        )
    _timeline_marks(ax, doc)
    if any(c > 0 for c in costs):  # NaN compares False: infinite costs are gaps
        ax.set_yscale("log")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("sum of D_i(load_i)")
    ax.set_title(f"Cost vs lower bound: final {result.cost:.4g} vs {result.cost_lower_bound:.4g}")
    ax.legend(fontsize=8)
    return _save(fig, path)


# --- sweeps ------------------------------------------------------------------------------------


def sweep_plots(directory: Path, results: pd.DataFrame) -> list[Path]:
    ok = results[results["error"].isna()]
    return [
        _by_k(
            directory / "acceptable_vs_k.png",
            ok,
            "acceptable",
            "fraction reaching acceptable",
            "Fraction of runs reaching an acceptable allocation",
            lambda s: s.mean(),
        ),
        _by_k(
            directory / "cost_ratio_vs_k.png",
            ok,
            "cost_ratio",
            "final cost / lower bound",
            "Final cost vs the lower bound (median)",
            lambda s: s.median(),
        ),
        _by_k(
            directory / "steps_vs_k.png",
            ok,
            "steps_to_acceptable",
            "steps to acceptable (median of runs reaching it)",
            "How fast: steps to an acceptable allocation",
            lambda s: s.median(),
        ),
    ]


def _by_k(path: Path, results: pd.DataFrame, column: str, ylabel: str, title: str, agg) -> Path:  # type: ignore[no-untyped-def]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    frame = results.copy()
    frame[column] = pd.to_numeric(frame[column].astype("Float64"), errors="coerce")
    for width, group in frame.groupby("price_range_width"):
        with warnings.catch_warnings():  # no run reached it: no median, a gap in the line
            warnings.simplefilter("ignore", RuntimeWarning)
            series = group.groupby("contracts_per_participant")[column].agg(agg)
        ax.plot(
            series.index,
            series.to_numpy(dtype=float),
            marker="o",
            label=f"price range {float(width):.0%}",
        )
    if column == "acceptable":
        ax.set_ylim(-0.02, 1.02)
        ax.axhline(0.95, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("contracts per participant (k)")
    ax.set_ylabel(ylabel)
    pooled = [
        c
        for c in ("participants", "load_skew", "capacity_spread", "overload")
        if frame[c].nunique() > 1
    ]
    suffix = f" (pooled over {', '.join(pooled)})" if pooled else ""
    ax.set_title(title + suffix, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


# --- the very large federation -----------------------------------------------------------------


def large_plots(
    directory: Path,
    rounds: Sequence[RoundRecord],
    initial_cost: float,
    lower_bound: float,
    capacity: np.ndarray,
    initial_load: np.ndarray,
    final_load: np.ndarray,
) -> list[Path]:
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4))
    r = [rec.round for rec in rounds]
    ax.plot(
        r,
        [rec.above_threshold for rec in rounds],
        marker="o",
        label="participants above threshold",
    )
    ax.plot(r, [rec.units_moved for rec in rounds], marker="s", label="load units moved")
    ax.set_yscale("symlog", linthresh=1)  # linear near zero: the last rounds reach 0
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round (one offer interval)")
    ax.set_title("Very large federation: convergence per round")
    ax.legend(fontsize=8)
    paths.append(_save(fig, directory / "large_rounds.png"))

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([0, *r], [initial_cost, *[rec.cost for rec in rounds]], marker="o", label="total cost")
    if math.isfinite(lower_bound):
        ax.axhline(
            lower_bound, color="black", linestyle="--", label=f"lower bound {lower_bound:.4g}"
        )
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_title("Cost vs lower bound (water-filling over all participants)")
    ax.legend(fontsize=8)
    paths.append(_save(fig, directory / "cost_vs_bound.png"))

    fig, ax = plt.subplots(figsize=(8, 4))
    bins = [i / 50 for i in range(51)]
    ax.hist(np.clip(initial_load / capacity, 0, 1), bins=bins, alpha=0.5, label="start")
    ax.hist(np.clip(final_load / capacity, 0, 1), bins=bins, alpha=0.5, label="end")
    ax.set_yscale("log")
    ax.set_xlabel("utilisation (load / capacity)")
    ax.set_ylabel("participants")
    ax.set_title("Utilisation per participant, start vs end")
    ax.legend(fontsize=8)
    paths.append(_save(fig, directory / "utilisation.png"))
    return paths
