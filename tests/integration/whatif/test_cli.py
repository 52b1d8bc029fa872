"""``fedload whatif`` on a federation file: the output contract, and bad scenarios refused by name.

No Spark here: one federation runs in this process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from markupsafe import escape
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


@dataclass(frozen=True)
class Run:
    out: Path
    exit_code: int
    output: str
    summary: dict[str, Any]
    html: str


Change = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def whatif(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Change | None], Run]:
    """``fedload whatif`` of the demo federation, changed by a function of its YAML data; each
    scenario runs once per module (plots take seconds) and the tests read its outputs."""
    done: dict[str, Run] = {}

    def of(change: Change | None = None) -> Run:
        key = change.__name__.strip("_") if change else "demo"
        if key not in done:
            base = tmp_path_factory.mktemp(key)
            source = DEMO
            if change is not None:
                data = yaml.safe_load(DEMO.read_text())
                change(data)
                source = base / f"{key}.yaml"
                source.write_text(yaml.safe_dump(data))
            out = base / "out"
            result = run(str(source), "--out", str(out))
            assert result.exit_code == 0, result.output
            done[key] = Run(
                out,
                result.exit_code,
                result.output,
                json.loads((out / "summary.json").read_text()),
                (out / "report.html").read_text(),
            )
        return done[key]

    return of


def test_demo_writes_the_summary_plots_and_a_self_contained_report(whatif):
    demo = whatif(None)
    out = demo.out
    summary = demo.summary
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
    html = demo.html
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


def test_demo_without_contracts_is_not_acceptable_and_the_cli_says_why(whatif):
    bare = whatif(_no_contracts)
    summary = bare.summary
    assert summary["acceptable"] is False and summary["cost"] is None  # A past capacity
    reason = (
        "A is over its threshold (130.0 > 100.0) and no contract path leads from A to spare "
        "capacity (C, D)"
    )
    assert summary["why_not_acceptable"][0] == reason
    flat = " ".join(bare.output.split())
    assert "NOT acceptable" in flat and "cost infinite" in flat and reason in flat


# --- item 1 of issue 16: every valid scenario finishes with a summary and a verdict ----------


def _no_contracts(d: dict) -> None:
    d["contracts"] = []


def _tenth(d: dict) -> None:
    for p in d["participants"]:
        p["capacity"] = p["capacity"] / 10


def _disconnected(d: dict) -> None:
    # A keeps no contract: {A} and {B, C, D} are two components of the contract graph.
    d["contracts"] = [c for c in d["contracts"] if "A" not in c["between"]]


def _d_without_contracts(d: dict) -> None:
    d["contracts"] = [c for c in d["contracts"] if "D" not in c["between"]]


def _empty_timeline(d: dict) -> None:
    d["timeline"] = []


def _leaves_while_hosting(d: dict) -> None:
    # At 300 s C hosts B's tasks and relays two to D: they all go back when C leaves.
    d["timeline"].append({"at": 300, "event": "leave", "participant": "C"})


SCENARIOS = [
    (_no_contracts, False, True),
    (_tenth, True, True),
    (_disconnected, False, True),
    (_d_without_contracts, False, True),
    (_empty_timeline, True, False),
    (_leaves_while_hosting, False, True),
]


@pytest.mark.parametrize(
    ("change", "acceptable", "infinite"), SCENARIOS, ids=[s[0].__name__[1:] for s in SCENARIOS]
)
def test_every_valid_scenario_ends_with_a_summary_and_a_one_line_verdict(
    whatif, change, acceptable, infinite
):
    done = whatif(change)
    assert done.exit_code == 0
    summary = done.summary
    assert set(summary) >= CONTRACT_KEYS
    assert summary["acceptable"] is acceptable
    verdict = summary["verdict"]
    assert "\n" not in verdict
    assert verdict.startswith("acceptable: " if acceptable else "not acceptable: ")
    # The verdict is the CLI's first line after the progress bar.
    flat = " ".join(done.output.split())
    shown = verdict if acceptable else "NOT" + verdict.removeprefix("not")
    assert f"borealis-demo: {' '.join(shown.split())}" in flat
    assert (summary["why_not_acceptable"] == []) is acceptable
    if infinite:
        # JSON has no infinity: null, and a sentence saying who sits at or past capacity.
        assert summary["cost"] is None and summary["cost_ratio"] is None
        assert summary["cost_note"].startswith("infinite: ")
        assert "at or past capacity" in summary["cost_note"]
    else:
        assert summary["cost"] > 0 and summary["cost_note"] is None
        assert summary["cost_ratio"] == pytest.approx(summary["cost"] / summary["cost_lower_bound"])
    assert done.html.count('src="data:image/png;base64,') == 3
    assert str(escape(verdict)) in done.html
    for reason in summary["why_not_acceptable"]:
        assert str(escape(reason)) in done.html


def test_a_participant_leaving_while_hosting_returns_its_tasks_and_says_why_not(whatif):
    done = whatif(_leaves_while_hosting)
    summary = done.summary
    # C left: everything it hosted or relayed went back the way it came; D, whose only
    # contract was with C, is cut off while B is far over its threshold.
    assert summary["final_load"]["C"] == 0.0 and summary["final_load"]["B"] == 165.0
    assert summary["why_not_acceptable"][0].startswith(
        "D has room (0.0 < threshold 80.0) while the federation is overloaded"
    )
    assert "4 tasks (50.0 units) returned from C to B: a participant on their way left" in (
        done.html
    )


@pytest.mark.parametrize(
    ("field", "yaml_value"),
    [("tasks[3].load", ".nan"), ("timeline[0].factor", ".inf")],
)
def test_nan_and_infinity_are_refused_naming_file_and_field(tmp_path, field, yaml_value):
    text = DEMO.read_text()
    if field.startswith("tasks"):
        text = text.replace(
            "{name: A.q03, owner: A, load: 5}", f"{{name: A.q03, owner: A, load: {yaml_value}}}"
        )
    else:
        text = text.replace("factor: 4,", f"factor: {yaml_value},")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["whatif", str(path), "--out", str(out)])
    assert result.exit_code == 2  # a user mistake (app.cli_errors)
    message = " ".join(result.output.split())
    # The federation loader names the file, the line and the field (app.federation.document).
    assert re.search(rf"{re.escape(str(path))}:\d+: {re.escape(field)}: must be a finite", message)
    assert not out.exists()


def test_the_demo_what_if_tells_the_story_of_make_demo(whatif):
    html = whatif(None).html
    assert "Against the story of <code>make demo</code>" in html
    # Seven claims of the README's story, each told by the what-if too.
    assert html.count("as in make demo") == 7
    assert 'class="text bad"' not in html
    assert "B shed 2 tasks (40.0 units) to D through C (a chained move) at 0.25" in html
    assert "t = 120 s: B&#39;s load x4" in html


def test_a_demo_without_contracts_says_where_its_story_differs(whatif):
    html = whatif(_no_contracts).html
    assert "A sheds to B and C</td>" in html
    assert "the what-if: nothing moved; ended not acceptable" in html


def test_capacities_cut_to_a_tenth_is_overloaded_and_names_who_is_below_without_room(whatif):
    summary = whatif(_tenth).summary
    assert summary["overloaded"] is True and summary["acceptable"] is True
    # D (joined empty) sits below its 3.7 threshold but a 5-unit task would take it past the
    # threshold's price: acceptable, and the verdict says so rather than "everyone at or above".
    assert summary["verdict"] == (
        "acceptable: the federation is overloaded (270.0 > 14.7) and nobody has room for a "
        "task: D is below the threshold without room for another task, everyone else at or "
        "above it"
    )
    assert summary["cost_lower_bound_note"] == (
        "infinite: no allocation over the contracts fits: {A, B, C, D} carries 270.0 against a "
        "capacity of 40.0"
    )
