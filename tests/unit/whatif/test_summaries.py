"""What-if summaries judge with the one acceptability rule and say why a run is not acceptable.

No Spark: one federation and a tiny sweep run in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from rich.console import Console

from app.federation.document import load_federation
from spark_jobs.whatif.job import run_federation, sweep_summary
from spark_jobs.whatif.sweep import run_in_process
from spark_jobs.whatif.sweep_file import GridSweep, parse_sweep

DEMO = Path(__file__).resolve().parents[3] / "contracts" / "borealis-demo.yaml"

TINY = """\
sweep: tiny
grid:
  participants: [4]
  contracts_per_participant: [1]
  price_range_width: [0.0]
  load_skew: 2.5
  tasks_per_participant: 4
  overload: [0.6]
seeds: 4
max_steps: 60
"""


def test_the_demo_without_contracts_is_not_acceptable_in_the_what_if_summary(tmp_path) -> None:
    data = yaml.safe_load(DEMO.read_text())
    data["contracts"] = []
    source = tmp_path / "no-contracts.yaml"
    source.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    run_federation(load_federation(source), out, max_steps=None, console=Console(quiet=True))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["acceptable"] is False
    assert summary["moves"] == 0
    assert summary["final_load"]["A"] == 130.0 and summary["thresholds"]["A"] == 100.0
    assert summary["why_not_acceptable"][0] == (
        "A is over its threshold (130.0 > 100.0) and no contract path leads from A to spare "
        "capacity (C, D)"
    )


def test_sweep_rows_and_summary_carry_the_reasons() -> None:
    sweep = parse_sweep(TINY, source="tiny.yaml")
    assert isinstance(sweep, GridSweep)
    results = run_in_process(sweep)
    assert results["error"].isna().all(), results["error"].dropna().tolist()
    for _, row in results.iterrows():
        assert bool(row["acceptable"]) == (row["why_not_acceptable"] is None)
    summary = sweep_summary(sweep, results, wall=1.0)
    failing = int((~results["acceptable"].astype(bool)).sum())
    if failing:
        assert summary["why_not_acceptable"][0].startswith(f"{failing} of {len(results)} runs")
        assert len(summary["why_not_acceptable"]) == 1 + min(failing, 3)
    else:
        assert summary["why_not_acceptable"] == []
