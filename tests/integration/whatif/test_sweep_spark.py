"""Sweeps on Spark return what simulate() returns for the same generated federations; the CLI's
sweep and large-federation outputs keep the contract."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.market.generate import generate_federation
from app.market.rounds import generate_large, run_rounds
from app.market.simulator import simulate
from spark_jobs.whatif.sweep import run_in_process, run_on_spark
from spark_jobs.whatif.sweep_file import GridSweep, parse_sweep

pytestmark = pytest.mark.spark

TINY = """\
sweep: tiny
grid:
  participants: [4, 6]
  contracts_per_participant: [1, 3]
  price_range_width: [0.0, 0.2]
  load_skew: 1.5
  tasks_per_participant: 4
seeds: 2
max_steps: 150
"""


def _tiny() -> GridSweep:
    sweep = parse_sweep(TINY, source="tiny.yaml")
    assert isinstance(sweep, GridSweep)
    return sweep


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _same(a: object, b: object) -> bool:
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    if isinstance(a, float) or isinstance(b, float):
        # Infinite costs (a node past capacity) compare equal to themselves.
        return a == b or math.isclose(float(a), float(b), rel_tol=1e-12)  # type: ignore[arg-type]
    return a == b


def test_sweep_on_spark_returns_the_figures_of_simulate(spark):
    sweep = _tiny()
    seen: list[int] = []
    results = run_on_spark(spark, sweep, seen.append, partitions=3)
    assert list(results["id"]) == list(range(sweep.size))
    assert results["error"].isna().all(), results["error"].dropna().tolist()
    assert seen[-1] == sweep.size  # the progress callback saw the end
    for row in results.to_dict("records"):
        doc = generate_federation(
            participants=row["participants"],
            contracts_per_participant=row["contracts_per_participant"],
            price_range_width=row["price_range_width"],
            load_skew=row["load_skew"],
            capacity_spread=row["capacity_spread"],
            seed=row["seed"],
            tasks_per_participant=row["tasks_per_participant"],
            overload=row["overload"],
        )
        direct = vars(simulate(doc, max_steps=sweep.max_steps))
        for key in (
            "acceptable",
            "steps_to_acceptable",
            "seconds_to_acceptable",
            "moves",
            "payments_total",
            "cost",
            "cost_lower_bound",
        ):
            assert _same(row[key], direct[key]), (row["id"], key, row[key], direct[key])
    # The single-process baseline is the same computation, row for row.
    local = run_in_process(sweep)
    pd.testing.assert_frame_equal(local, results)


def test_cli_sweep_writes_results_parquet_summary_and_report(spark, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["whatif", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == _tiny().size
    assert {"participants", "contracts_per_participant", "price_range_width", "seed"} <= set(
        table.columns
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == len(table)
    assert summary["fraction_acceptable"] == pytest.approx(table["acceptable"].mean())
    # A sweep answers with a fraction, never a yes/no.
    assert "acceptable" not in summary
    assert summary["verdict"].startswith(f"acceptable in {summary['fraction_acceptable']:.1%}")
    for key in ("steps_to_acceptable", "moves", "payments_total", "cost"):
        assert key in summary
    assert len(summary["groups"]) == 8
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3


def test_cli_large_federation_matches_the_numpy_rounds(spark, tmp_path):
    out = tmp_path / "large"
    args = ["--large", "40", "--k", "4", "--seed", "3", "--skew", "1.5", "--utilisation", "0.8"]
    result = CliRunner().invoke(cli, ["whatif", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    fed = generate_large(
        participants=40,
        contracts_per_participant=4,
        load_skew=1.5,
        utilisation=0.8,
        seed=3,
    )
    reference = run_rounds(fed, max_rounds=200)
    assert summary["acceptable"] == reference.acceptable
    assert summary["verdict"].startswith("acceptable: " if reference.acceptable else "not ")
    assert summary["steps_to_acceptable"] == reference.rounds_to_acceptable
    assert summary["rounds"] == len(reference.rounds)
    names = sorted(summary["final_load"])
    assert len(names) == 40
    np.testing.assert_array_equal([summary["final_load"][n] for n in names], reference.final_load)
    np.testing.assert_array_equal([summary["thresholds"][n] for n in names], reference.thresholds)
    assert summary["cost_lower_bound"] <= summary["cost"]
    assert (out / "report.html").exists() and (out / "large_rounds.png").exists()
