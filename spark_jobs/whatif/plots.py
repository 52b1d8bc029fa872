"""PNG plots of what-if runs (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import math
import textwrap
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator, NullLocator

from app.federation.document import FederationDoc
from app.market.cost_models import build_cost_model
from app.market.lower_bound import cost_lower_bound
from app.market.rounds import RoundRecord
from app.market.simulator import SimulationResult, StepRecord

DPI = 110


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# --- one federation --------------------------------------------------------------------------

# Small multiples: one panel per participant, so no series hides another (in the demo four
# thresholds of 80 and two loads of 75 coincide on one axis). Past this many participants the
# panels show those that came closest to (or went past) their thresholds, and one more panel
# shows the range of all the others.
MAX_PANELS = 12
OVER = "#c0392b"
OFFLINE = "#e6e6e6"


def federation_plots(directory: Path, doc: FederationDoc, result: SimulationResult) -> list[Path]:
    return [
        _loads_over_time(directory / "loads.png", doc, result),
        _marginal_costs(directory / "marginal_costs.png", doc, result),
        _cost_vs_bound(directory / "cost_vs_bound.png", doc, result),
    ]


def _steps(result: SimulationResult) -> list[StepRecord]:
    """The trace, plus its last state again at the horizon: a run that stopped early (nothing
    could change any more) holds that state to the end, and a one-step trace is still a line."""
    trace = list(result.trace)
    if trace and result.horizon_seconds > trace[-1].t:
        trace.append(replace(trace[-1], t=result.horizon_seconds))
    return trace


def _times(result: SimulationResult) -> list[float]:
    return [step.t for step in _steps(result)]


def _series(result: SimulationResult, name: str) -> tuple[list[float], list[float]]:
    """A participant's load over time, starting from the allocation before the first offer
    round (the trace's first step is already after it); NaN while it is not in the federation."""
    times = [0.0] if result.trace else []
    values = [result.initial_load.get(name, math.nan)] if result.trace else []
    for step in _steps(result):
        times.append(step.t)
        values.append(step.loads.get(name, math.nan) if name in step.marginal_costs else math.nan)
    return times, values


def _panels(names: Sequence[str], result: SimulationResult) -> tuple[list[str], list[str]]:
    """The participants with a panel of their own, and the rest (shown as one range)."""
    if len(names) <= MAX_PANELS:
        return list(names), []

    def peak(name: str) -> float:
        threshold = result.thresholds.get(name, math.inf)
        values = [v for v in _series(result, name)[1] if math.isfinite(v)]
        return max(values, default=0.0) / threshold if threshold > 0 else math.inf

    ranked = sorted(names, key=lambda n: (-peak(n), n))
    shown = ranked[: MAX_PANELS - 1]
    return [n for n in names if n in shown], [n for n in names if n not in shown]


def _grid(
    count: int, height: float = 2.0, sharey: bool = False
) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = 1 if count == 1 else 2 if count <= 4 else 3
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(10, 1.2 + height * rows), sharex=True, sharey=sharey, squeeze=False
    )
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def _offline_spans(ax: plt.Axes, times: Sequence[float], values: Sequence[float]) -> None:
    """Grey where the participant is not in the federation (not joined yet, or left)."""
    start = None
    for t, v in zip([*times, math.inf], [*values, 0.0], strict=True):
        if math.isnan(v) and start is None:
            start = t
        elif not math.isnan(v) and start is not None:
            ax.axvspan(start, min(t, times[-1]), color=OFFLINE, zorder=0, linewidth=0)
            start = None


def _timeline_marks(ax: plt.Axes, doc: FederationDoc, label: bool = True) -> None:
    for event in doc.timeline:
        ax.axvline(event.at, color="grey", linewidth=0.6, linestyle=":")
        if not label:
            continue
        text = f"{event.event} {event.participant or event.task or ''}".strip()
        ax.annotate(
            text,
            (event.at, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            rotation=90,
            va="top",
            ha="right",
            color="grey",
        )


def _loads_over_time(path: Path, doc: FederationDoc, result: SimulationResult) -> Path:
    names = [p.name for p in doc.participants]
    shown, rest = _panels(names, result)
    # One load scale for every panel, so heights compare; the range panel is a ratio.
    fig, axes = _grid(len(shown) + (1 if rest else 0), sharey=not rest)
    for ax, name in zip(axes, shown, strict=False):
        times, values = _series(result, name)
        threshold = result.thresholds.get(name, math.nan)
        ax.plot(times, values, drawstyle="steps-post", color="#1f77b4", label="load")
        if math.isfinite(threshold):
            ax.axhline(threshold, color="black", linestyle="--", linewidth=0.9, label="threshold")
            over = [v > threshold + 1e-9 if math.isfinite(v) else False for v in values]
            if any(over):
                ax.fill_between(
                    times,
                    threshold,
                    values,
                    where=over,
                    step="post",
                    color=OVER,
                    alpha=0.3,
                    label="over threshold",
                )
        _offline_spans(ax, times, values)
        _timeline_marks(ax, doc, label=ax is axes[0])
        final = result.final_load.get(name, math.nan)
        ax.set_title(f"{name}: ends at {final:.1f} / threshold {threshold:.1f}", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.tick_params(labelsize=7)
    if rest:
        ax = axes[-1]
        times = [0.0, *_times(result)] if result.trace else []
        columns = [
            [v / result.thresholds[n] if result.thresholds.get(n) else math.nan for v in values]
            for n in rest
            for values in [_series(result, n)[1]]
        ]
        matrix = np.array(columns, dtype=float)
        with warnings.catch_warnings():  # a step where all of them are offline: a gap
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = np.nanmin(matrix, axis=0), np.nanmax(matrix, axis=0)
        ax.fill_between(times, lo, hi, step="post", color="#7f7f7f", alpha=0.5, label="range")
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.9)
        ax.set_title(f"the other {len(rest)}: load / threshold, min to max", fontsize=9)
        ax.tick_params(labelsize=7)
    _legend(fig, axes)
    fig.suptitle(
        "Load per participant (dashed: capacity threshold at the end; red: over it; "
        "grey: not in the federation)",
        fontsize=10,
        x=0.02,
        ha="left",
    )
    fig.supxlabel("simulated time (s)", fontsize=9, x=0.02, ha="left")
    fig.supylabel("load (units)", fontsize=9)
    return _save(fig, path)


def _legend(fig: plt.Figure, axes: Sequence[plt.Axes]) -> None:
    """One legend for all panels, below them (every entry any panel uses, once)."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.legend(
        list(handles.values()), list(handles), loc="lower right", fontsize=8, ncol=4, frameon=False
    )


def _price_band(doc: FederationDoc, name: str) -> tuple[float, float] | None:
    ranges = [(c.price_min, c.price_max) for c in doc.contracts if name in (c.a, c.b)]
    if not ranges:
        return None
    return min(lo for lo, _ in ranges), max(hi for _, hi in ranges)


def _marginal_costs(path: Path, doc: FederationDoc, result: SimulationResult) -> Path:
    names = [p.name for p in doc.participants]
    shown, rest = _panels(names, result)
    fig, axes = _grid(len(shown), sharey=True)  # one price scale for every panel
    times = _times(result)
    finite = [
        v
        for step in _steps(result)
        for v in step.marginal_costs.values()
        if math.isfinite(v) and v > 0
    ]
    bands = [b for n in shown for b in [_price_band(doc, n)] if b is not None]
    levels = finite + [x for band in bands for x in band]
    bottom = min(levels, default=1e-3) / 2
    top = max(levels, default=1.0) * 4
    for ax, name in zip(axes, shown, strict=False):
        values = [step.marginal_costs.get(name, math.nan) for step in _steps(result)]
        ax.plot(
            times,
            [v if math.isfinite(v) else math.nan for v in values],
            drawstyle="steps-post",
            color="#1f77b4",
            label="marginal cost (last unit)",
        )
        band = _price_band(doc, name)
        if band is not None:
            ax.axhspan(band[0], band[1], color="#2ca02c", alpha=0.25, label="its contract prices")
        # Past capacity the marginal cost is infinite: drawn as a red bar at the panel's top.
        infinite = [math.isinf(v) for v in values]
        if any(infinite):
            ax.fill_between(
                times,
                top / 1.6,
                top,
                where=infinite,
                step="post",
                color=OVER,
                alpha=0.8,
                label="infinite (at or past capacity)",
            )
        _offline_spans(
            ax,
            times,
            [
                v if name in s.marginal_costs else math.nan
                for v, s in zip(values, _steps(result), strict=True)
            ],
        )
        _timeline_marks(ax, doc, label=ax is axes[0])
        ax.set_yscale("log")
        ax.yaxis.set_minor_locator(NullLocator())  # decades suffice; minor ticks cost seconds
        ax.set_ylim(bottom, top)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    _legend(fig, axes)
    hidden = f"; {len(rest)} others not shown" if rest else ""
    fig.suptitle(f"Marginal cost per unit load (log scale){hidden}", fontsize=10, x=0.02, ha="left")
    fig.supxlabel("simulated time (s)", fontsize=9, x=0.02, ha="left")
    return _save(fig, path)


def total_cost_series(doc: FederationDoc, result: SimulationResult) -> list[float]:
    models = {p.name: build_cost_model(p.cost_model, p.capacity) for p in doc.participants}
    return [
        math.fsum(
            models[n].cost(load) for n, load in step.loads.items() if n in step.marginal_costs
        )
        for step in _steps(result)
    ]


def lower_bound_series(doc: FederationDoc, result: SimulationResult) -> list[float]:
    """The lower bound at each step's loads (the load changes with the timeline: a bound at the
    final load says nothing about the first act). Steps share a snapshot until something
    changes, so it is computed once per snapshot."""
    models = {p.name: build_cost_model(p.cost_model, p.capacity) for p in doc.participants}
    pairs = [(c.a, c.b) for c in doc.contracts]
    cache: dict[int, float] = {}
    out = []
    for step in _steps(result):
        key = id(step.loads)
        if key not in cache:
            online = {n: models[n] for n in step.marginal_costs}
            cache[key] = cost_lower_bound(online, {n: step.loads[n] for n in online}, pairs)
        out.append(cache[key])
    return out


def _figure(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "infinite"


def _cost_vs_bound(path: Path, doc: FederationDoc, result: SimulationResult) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    times = _times(result)
    costs = total_cost_series(doc, result)
    bounds = lower_bound_series(doc, result)
    finite = [c for c in costs + bounds if math.isfinite(c)]
    ax.plot(
        times,
        [c if math.isfinite(c) else math.nan for c in costs],
        drawstyle="steps-post",
        label="total cost of the allocation",
    )
    ax.plot(
        times,
        [b if math.isfinite(b) else math.nan for b in bounds],
        drawstyle="steps-post",
        color="black",
        linestyle="--",
        linewidth=0.9,
        label="lower bound at that step's load",
    )
    infinite = [math.isinf(c) for c in costs]
    if any(infinite):
        ax.fill_between(
            times,
            0,
            1,
            where=infinite,
            step="post",
            transform=ax.get_xaxis_transform(),
            color=OVER,
            alpha=0.15,
            label="cost infinite (a participant at or past capacity)",
        )
    _timeline_marks(ax, doc)
    if finite and min(finite) > 0 and max(finite) / min(finite) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("sum of D_i(load_i)")
    if not finite:
        # Nothing to draw on a scale: say so in the panel instead of leaving it blank.
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            textwrap.fill(
                "cost infinite at every step: "
                + (result.cost_note or "").removeprefix("infinite: "),
                90,
            ),
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=9,
        )
    ratio = result.cost_ratio
    final = f"final {_figure(result.cost)} vs bound {_figure(result.cost_lower_bound)}" + (
        f" ({ratio:.2f}x)" if ratio is not None else ""
    )
    ax.set_title(f"Total cost vs the lower bound: {final}", fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DASHES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))

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
    groups = list(frame.groupby("price_range_width"))
    for n, (width, group) in enumerate(groups):
        with warnings.catch_warnings():  # no run reached it: no median, a gap in the line
            warnings.simplefilter("ignore", RuntimeWarning)
            series = group.groupby("contracts_per_participant")[column].agg(agg)
        # Widths often give equal values (every run acceptable): each width its own marker and
        # dash, nudged sideways, so no line hides behind another.
        dodge = (n - (len(groups) - 1) / 2) * 0.06
        ax.plot(
            series.index.to_numpy(dtype=float) + dodge,
            series.to_numpy(dtype=float),
            marker=MARKERS[n % len(MARKERS)],
            linestyle=DASHES[n % len(DASHES)],
            markersize=6,
            label=f"price range {float(width):.0%}",
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if column == "acceptable":
        ax.set_ylim(-0.02, 1.02)
        ax.axhline(0.95, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("contracts per participant (k); widths nudged sideways")
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
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_title("Cost vs lower bound (water-filling over all participants)")
    ax.legend(fontsize=8)
    paths.append(_save(fig, directory / "cost_vs_bound.png"))

    fig, ax = plt.subplots(figsize=(8, 4))
    bins = [i / 50 for i in range(51)]
    # Outlines, not filled bars: filled, the end hid the start wherever they overlapped.
    ax.hist(
        np.clip(initial_load / capacity, 0, 1),
        bins=bins,
        histtype="step",
        linewidth=1.6,
        label="start",
    )
    ax.hist(
        np.clip(final_load / capacity, 0, 1),
        bins=bins,
        histtype="step",
        linewidth=1.6,
        linestyle="--",
        label="end",
    )
    ax.set_yscale("log")
    ax.set_xlabel("utilisation (load / capacity)")
    ax.set_ylabel("participants")
    ax.set_title("Utilisation per participant, start vs end")
    ax.legend(fontsize=8)
    paths.append(_save(fig, directory / "utilisation.png"))
    return paths
