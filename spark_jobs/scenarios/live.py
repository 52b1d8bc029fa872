"""The demo's live terminal view: each participant's load against its threshold, and the moves."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from app.participant.node import MoveEvent

BAR = 24


def _bar(load: float, threshold: float, capacity: float) -> Text:
    filled = min(BAR, round(BAR * load / capacity)) if capacity > 0 else 0
    mark = min(BAR - 1, round(BAR * threshold / capacity)) if capacity > 0 else 0
    text = Text()
    for i in range(BAR):
        over = i >= mark
        text.append(
            "|" if i == mark else ("#" if i < filled else "."),
            style="red" if over and i < filled else ("green" if i < filled else "dim"),
        )
    return text


def render(
    now: float,
    rows: Sequence[tuple[str, str, float, float, float, float, int]],
    moves: Sequence[MoveEvent],
    acceptable: bool,
    reason: str,
) -> Group:
    """rows: (participant, liveness, load, threshold, capacity, marginal cost, tasks hosted)."""
    table = Table(title=f"t = {now:5.0f} s", expand=False)
    for column in ("participant", "state", "load", "threshold", "load vs threshold", "MC", "tasks"):
        table.add_column(
            column, justify="right" if column in ("load", "threshold", "MC", "tasks") else "left"
        )
    for name, liveness, load, threshold, capacity, mc, hosted in rows:
        table.add_row(
            name,
            liveness,
            f"{load:6.1f}",
            f"{threshold:6.1f}",
            _bar(load, threshold, capacity),
            "inf" if mc == float("inf") else f"{mc:.3f}",
            str(hosted),
        )
    status = Text(
        "acceptable allocation" if acceptable else f"not acceptable: {reason}",
        style="bold green" if acceptable else "bold yellow",
    )
    recent = Table.grid(padding=(0, 1))
    for move in list(moves)[-8:]:
        price = "" if move.price is None else f"at {move.price:.3f}"
        recent.add_row(
            f"{move.at:5.0f} s", f"{move.task}", f"{move.src} -> {move.dst}", move.reason, price
        )
    return Group(table, status, Panel(recent, title=f"moves ({len(moves)})"))
