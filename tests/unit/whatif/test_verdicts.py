"""The what-if's verdict follows the definition (DESIGN.md, "Acceptable allocation") on hand-made
federations, says why not in the words of the one rule, and a sweep reports a fraction.

No Spark, no files but a report directory: each federation is parsed from text and simulated.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from app.federation.document import parse_federation
from app.market.simulator import simulate
from spark_jobs.whatif.job import run_sweep, sweep_summary
from spark_jobs.whatif.sweep import FIGURES, PARAMETERS
from spark_jobs.whatif.sweep_file import GridSweep, parse_sweep

# Three M/M/1 participants of capacity 100; prices 0.24-0.26 put every threshold at 80
# (contracts/borealis-demo.yaml explains the arithmetic). Tasks of 10 units.
HEAD = """\
federation: hand-made
participants:
  - {name: A, capacity: 100}
  - {name: B, capacity: 100}
  - {name: C, capacity: 100}
simulation: {duration_seconds: 120, hysteresis: 0.005}
"""


def tasks(owner: str, count: int, load: float = 10) -> str:
    return "".join(
        f"  - {{name: {owner}.t{i}, owner: {owner}, load: {load}}}\n" for i in range(count)
    )


def contracts(*pairs: str, low: float = 0.24, high: float = 0.26) -> str:
    lines = [
        f"  - {{between: [{p[0]}, {p[1]}], price_min: {low}, price_max: {high}}}\n" for p in pairs
    ]
    return "contracts:\n" + "".join(lines) if lines else "contracts: []\n"


def run(text: str):
    return simulate(parse_federation(text, source="hand-made.yaml"))


def test_underloaded_and_connected_ends_acceptable_below_every_threshold() -> None:
    result = run(HEAD + contracts("AB", "BC") + "tasks:\n" + tasks("A", 12))
    assert result.acceptable and not result.overloaded
    assert all(result.final_load[n] <= result.thresholds[n] for n in "ABC")
    assert result.final_load["A"] < 120  # load moved, through B to C if need be
    assert result.verdict == "acceptable: every participant is below its capacity threshold"
    assert result.reasons == () and result.cost_note is None
    assert result.cost_ratio is not None and result.cost_ratio >= 1.0


def test_overloaded_is_acceptable_once_everyone_is_at_or_above_threshold() -> None:
    # 290 units against 240 of thresholds: nobody can be below, everybody must be at or above.
    text = HEAD + contracts("AB", "BC", "AC") + "tasks:\n" + tasks("A", 25) + tasks("B", 4)
    result = run(text)
    assert result.overloaded and result.acceptable
    assert all(result.final_load[n] >= result.thresholds[n] - 10 for n in "ABC")
    assert result.verdict.startswith("acceptable: the federation is overloaded")


def test_disconnected_graph_is_not_acceptable_and_names_the_missing_path() -> None:
    # A and B share a contract and are both full; C has room and no contract with either.
    text = HEAD + contracts("AB") + "tasks:\n" + tasks("A", 9) + tasks("B", 7)
    result = run(text)
    assert not result.acceptable and not result.overloaded
    assert result.reasons[0] == (
        "A is over its threshold (90.0 > 80.0) and no contract path leads from A to spare "
        "capacity (C)"
    )
    assert result.verdict == "not acceptable: " + result.reasons[0]


def test_no_contracts_over_capacity_is_not_acceptable_with_an_infinite_cost_explained() -> None:
    # Without contracts a threshold is the capacity: A at 130 of 100 is over, B and C have room.
    result = run(HEAD + contracts() + "tasks:\n" + tasks("A", 13) + tasks("B", 2))
    assert not result.acceptable and result.moves == 0
    assert result.reasons == (
        "A is over its threshold (130.0 > 100.0) and no contract path leads from A to spare "
        "capacity (B, C)",
    )
    assert math.isinf(result.cost) and result.summary()["cost"] is None
    assert result.cost_note == (
        "infinite: A (130.0 of capacity 100.0) is at or past capacity, where the cost model has "
        "no finite value"
    )
    assert result.cost_lower_bound_note == (
        "infinite: no allocation over the contracts fits: {A} carries 130.0 against a capacity "
        "of 100.0"
    )


def test_a_participant_without_contracts_blocks_only_itself() -> None:
    # A without contracts: its threshold is its capacity (100), and at 110 it is over it.
    text = HEAD + contracts("BC") + "tasks:\n" + tasks("A", 11) + tasks("B", 9)
    result = run(text)
    assert not result.acceptable
    assert result.thresholds["A"] == 100.0
    assert result.final_load["B"] <= result.thresholds["B"]  # B shed to C
    (reason,) = result.reasons
    assert reason == (
        "A is over its threshold (110.0 > 100.0) and no contract path leads from A to spare "
        "capacity (C)"
    )


def test_prices_below_the_takers_marginal_cost_on_every_path_are_named() -> None:
    # A's only contract pays at most 0.02 per unit; C, with room below its threshold (~72),
    # takes a 10-unit task at 50 only for 0.05 per unit. B has room too, but the way to B
    # through C would have to raise the price (0.02 -> 0.24).
    text = (
        HEAD
        + "contracts:\n"
        + "  - {between: [A, C], price_min: 0.01, price_max: 0.02}\n"
        + "  - {between: [B, C], price_min: 0.24, price_max: 0.26}\n"
        + "tasks:\n"
        + tasks("A", 5)
        + tasks("C", 5)
    )
    result = run(text)
    assert not result.acceptable
    (reason,) = result.reasons
    assert reason.startswith("A is over its threshold")
    assert "prices on every path are below the marginal cost of taking load at C" in reason
    assert "prices rise along every path to B" in reason


def _results(acceptable: list[bool]) -> pd.DataFrame:
    rows = []
    for i, ok in enumerate(acceptable):
        row: dict[str, Any] = {name: 0 for name in PARAMETERS}
        row.update(id=i, participants=4, contracts_per_participant=2, seed=i)
        row.update(price_range_width=0.1, load_skew=1.0, capacity_spread=0.5, overload=0.7)
        row.update({name: None for name in FIGURES})
        row.update(acceptable=ok, cost=1.0, cost_lower_bound=1.0, cost_ratio=1.0, moves=1)
        row["why_not_acceptable"] = None if ok else "A is over its threshold (90.0 > 80.0)"
        rows.append(row)
    return pd.DataFrame(rows)


def test_a_sweep_reports_the_fraction_acceptable_never_yes_or_no() -> None:
    sweep = parse_sweep(
        "sweep: s\ngrid: {participants: 4, contracts_per_participant: 2, "
        "price_range_width: 0.1}\nseeds: 100\n",
        source="s.yaml",
    )
    assert isinstance(sweep, GridSweep)
    summary = sweep_summary(sweep, _results([True] * 91 + [False] * 9), wall=1.0)
    assert "acceptable" not in summary  # no yes/no for 100 runs
    assert summary["fraction_acceptable"] == pytest.approx(0.91)
    assert summary["acceptable_runs"] == 91
    assert summary["verdict"] == (
        "acceptable in 91.0% of runs (91 of 100 ended in an acceptable allocation)"
    )
    assert summary["why_not_acceptable"][0] == (
        "9 of 100 runs did not end in an acceptable allocation"
    )


def test_a_sweep_report_shows_the_fraction(tmp_path) -> None:
    sweep = parse_sweep(
        "sweep: tiny\ngrid: {participants: 4, contracts_per_participant: [1, 2], "
        "price_range_width: [0.0, 0.1], tasks_per_participant: 3}\nseeds: 2\nmax_steps: 40\n",
        source="tiny.yaml",
    )
    assert isinstance(sweep, GridSweep)
    summary = run_sweep(sweep, tmp_path, console=Console(quiet=True), in_process=True)
    html = (tmp_path / "report.html").read_text()
    assert summary["verdict"] in html
    assert f"{summary['fraction_acceptable']:.1%}" in html
    assert '<th class="text">acceptable</th>' not in html
    assert html.count("data:image/png;base64,") == 3
