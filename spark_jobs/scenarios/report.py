"""The demo's report directory: report.json, and PNG plots a person would rather look at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def write_report(directory: Path, report: dict[str, Any]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    plots = [_loads_plot(directory, report), _moves_plot(directory, report)]
    report = {**report, "plots": [p.name for p in plots]}
    (directory / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return plots


def _loads_plot(directory: Path, report: dict[str, Any]) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, series in report["loads"].items():
        times = [p["at"] for p in series]
        (line,) = ax.plot(times, [p["load"] for p in series], label=f"{name} load")
        ax.plot(
            times,
            [p["threshold"] for p in series],
            linestyle="--",
            color=line.get_color(),
            linewidth=0.8,
            label=f"{name} threshold",
        )
    for event in report.get("timeline", []):
        ax.axvline(event["at"], color="grey", linewidth=0.6)
        ax.annotate(
            event["event"],
            (event["at"], ax.get_ylim()[1]),
            fontsize=7,
            rotation=90,
            va="top",
            ha="right",
            color="grey",
        )
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("load (units)")
    ax.set_title("Load per participant and its capacity threshold")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = directory / "loads.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _moves_plot(directory: Path, report: dict[str, Any]) -> Path:
    names = sorted(report["loads"])
    row = {n: i for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for move in report["moves"]:
        ax.annotate(
            "",
            xy=(move["at"], row[move["to"]]),
            xytext=(move["at"], row[move["from"]]),
            arrowprops={"arrowstyle": "->", "color": "tab:blue", "alpha": 0.6},
        )
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("simulated time (s)")
    ax.set_title(f"Moves ({len(report['moves'])}): arrows from giver to taker")
    ax.set_xlim(0, max([p["at"] for s in report["loads"].values() for p in s] + [1]))
    ax.set_ylim(-0.5, len(names) - 0.5)
    fig.tight_layout()
    path = directory / "moves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
