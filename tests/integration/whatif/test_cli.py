"""``fedload whatif`` on a federation file: the output contract, and bad scenarios refused by name.

No Spark here: one federation runs in this process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.federation.document import load_federation
from app.market.simulator import simulate

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "contracts" / "borealis-demo.yaml"
CONTRACT_KEYS = {
    "acceptable",
    "steps_to_acceptable",
    "moves",
    "payments_total",
    "cost",
    "cost_lower_bound",
    "final_load",
    "thresholds",
}


def run(*args: str):
    return CliRunner().invoke(cli, ["whatif", *args], catch_exceptions=False)


def test_demo_writes_the_summary_plots_and_a_self_contained_report(tmp_path):
    out = tmp_path / "demo"
    result = run(str(DEMO), "--out", str(out))
    assert result.exit_code == 0, result.output

    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= CONTRACT_KEYS
    # The figures are the simulator's own, for the same file.
    expected = json.loads(json.dumps(simulate(load_federation(DEMO)).summary()))
    for key in CONTRACT_KEYS:
        assert summary[key] == expected[key], key
    assert set(summary["final_load"]) == {"A", "B", "C", "D"}
    assert set(summary["thresholds"]) == {"A", "B", "C", "D"}
    assert summary["steps_to_acceptable"] is None or summary["steps_to_acceptable"] >= 0

    for name in ("loads.png", "marginal_costs.png", "cost_vs_bound.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 3
    # Self-contained: nothing fetched from anywhere.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)


BAD = [
    (
        "contracts:\n  - {between: [A, Z], price_min: 0.2, price_max: 0.3}\n",
        "contracts[0].between[1]",
        "unknown participant 'Z'",
    ),
    ("", "participants[1].capacity", "0"),  # capacity -5 below
    (
        "",
        "participants[0].cost_model.points[1]",
        "not convex",
    ),
]


@pytest.mark.parametrize(("extra", "field", "words"), BAD)
def test_bad_scenario_exits_non_zero_naming_file_and_field(tmp_path, extra, field, words):
    a_model = (
        "{kind: piecewise, points: [[0, 0], [1, 4], [2, 5]]}"
        if "cost_model" in field
        else "{kind: mm1}"
    )
    b_capacity = -5 if "capacity" in field else 100
    text = (
        "federation: bad\n"
        "participants:\n"
        f"  - {{name: A, capacity: 100, cost_model: {a_model}}}\n"
        f"  - {{name: B, capacity: {b_capacity}}}\n" + extra
    )
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["whatif", str(path), "--out", str(out)])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert str(path) in message
    assert field in message
    assert words in message
    assert not out.exists()  # nothing written for a refused scenario


def test_bad_sweep_file_exits_non_zero_naming_file_and_field(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "sweep: s\ngrid:\n  participants: 5\n  contracts_per_participant: [1, 9]\n"
        "  price_range_width: 0.1\nseeds: 2\n"
    )
    result = CliRunner().invoke(cli, ["whatif", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert f"{path}:4: grid.contracts_per_participant[1]:" in message
    assert not (tmp_path / "o").exists()


def test_missing_file_and_bad_large_options_are_named(tmp_path):
    result = CliRunner().invoke(cli, ["whatif", str(tmp_path / "nope.yaml"), "--out", "x"])
    assert result.exit_code == 2
    assert "nope.yaml" in result.output
    result = CliRunner().invoke(
        cli, ["whatif", "--large", "9", "--k", "3", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "--k" in result.output and "even number" in " ".join(result.output.split())


def test_demo_without_contracts_is_not_acceptable_and_the_cli_says_why(tmp_path):
    import yaml

    data = yaml.safe_load(DEMO.read_text())
    data["contracts"] = []
    source = tmp_path / "no-contracts.yaml"
    source.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    result = run(str(source), "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["acceptable"] is False and summary["cost"] is None  # A past capacity
    reason = (
        "A is over its threshold (130.0 > 100.0) and no contract path leads from A to spare "
        "capacity (C, D)"
    )
    assert summary["why_not_acceptable"][0] == reason
    flat = " ".join(result.output.split())
    assert "NOT acceptable" in flat and "cost infinite" in flat and reason in flat
