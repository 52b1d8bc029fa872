"""The tentative scenario's latency plot: per input bucket, when each DPC copy first processed
it (tentatively or stably), with the cut, each copy's reconciliation and the limit X drawn in.
Where a copy passed X, the plot shows at once whether it was reconciling then and whether the
other copy was ahead."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLOURS = ("tab:blue", "tab:orange", "tab:green")


class Latencies(Protocol):
    """``tentative.CopyLatency`` as the plot reads it (no import: the scenario imports this)."""

    @property
    def live(self) -> dict[int, tuple[float, bool]]: ...

    @property
    def baseline(self) -> float | None: ...

    def ends_at(self, bucket: int) -> float: ...


def plot_latencies(
    path: Path,
    copies: Mapping[str, Latencies],
    *,
    started: float,
    failure_at: float,
    heal_at: float,
    max_delay_s: float,
    reconciliations: Mapping[str, Sequence[Mapping[str, Any]]],
) -> Path:
    """``reconciliations``: per copy, periods with ``began`` and ``stable`` in ms since
    ``started`` (the report's), drawn as bands under the points."""
    fig, ax = plt.subplots(figsize=(10, 4.8))
    ax.axvspan(failure_at - started, heal_at - started, color="tab:red", alpha=0.12, label="cut")
    for index, (name, copy) in enumerate(sorted(copies.items())):
        colour = COLOURS[index % len(COLOURS)]
        points = sorted((copy.ends_at(b) - started, lat, t) for b, (lat, t) in copy.live.items())
        stable = [(x, y) for x, y, tentative in points if not tentative]
        tentative = [(x, y) for x, y, t in points if t]
        if stable:
            ax.scatter(
                [x for x, _ in stable],
                [y for _, y in stable],
                s=4,
                color=colour,
                label=f"{name} stable",
            )
        if tentative:
            ax.scatter(
                [x for x, _ in tentative],
                [y for _, y in tentative],
                s=10,
                marker="x",
                color=colour,
                label=f"{name} tentative",
            )
        if copy.baseline is not None:
            ax.axhline(
                copy.baseline + max_delay_s,
                color=colour,
                linestyle="--",
                linewidth=0.8,
                label=f"{name} baseline + X",
            )
        for period in reconciliations.get(name, []):
            began, stable_at = period.get("began"), period.get("stable")
            if began is None:
                continue
            end = stable_at if stable_at is not None else began
            ax.axvspan(
                began / 1000, end / 1000, ymin=0, ymax=0.04 * (index + 1), color=colour, alpha=0.5
            )
    ax.set_xlabel("bucket end (s since the consumer started); bands at the bottom: reconciling")
    ax.set_ylabel("latency at the copy (s)")
    ax.set_title(f"First processing of each input bucket per copy (X = {max_delay_s:g} s)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
