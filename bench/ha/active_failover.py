"""Failover through the product: an active replica's running copy against a restart, same run.

PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
  .venv/bin/python -m bench.ha.active_failover [--json FILE] [--runs N]

The crash scenario through the product (``spark_jobs/scenarios/crash.py``: ``fedload serve``, one
``fedload agent`` per participant, a SIGKILL of S's agent). Its P.x and V.x are the same fragment
over the same seeded input on S, each with a ``precise`` contract with T: P.x with a passive
standby (T restarts it from the last checkpoint S shipped), V.x with an active replica (T's
running DPC copy takes it over, ``spark_jobs/runtime/promote.py``). Both recover in the same
run, on the same loaded machine. Per run and path:

- ``takeover_seconds``: T begins that task's takeover -> the task's output boundary (at its
  owner) passes where it stood at the kill. T performs takeovers one after the other, so this is
  what each path costs on its own;
- ``recovery_seconds``: the SIGKILL -> the same moment (detection and T's earlier takeovers
  included; T takes active replicas over first);
- the ratio active / restart of each, and the outputs' lost and duplicated rows against the
  failure-free reference (both must be 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.ha.provenance import load_average, provenance
from spark_jobs.scenarios.crash import CrashOptions, run_crash

PATHS = {"restart (passive standby)": "precise", "running copy (active replica)": "active"}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else round(a / b, 3)


def measure(runs: int, console: Console) -> dict[str, Any]:
    load_before = load_average()
    began = time.monotonic()
    rows = []
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="fedload-active-failover-") as work:
            report = run_crash(
                CrashOptions(report_dir=Path(work) / "report", work=Path(work) / "work"),
                console,
            )
        recovery = report.get("recovery", {})
        row: dict[str, Any] = {
            "run": run + 1,
            "detection_seconds": report.get("detection_seconds"),
            "ok": report.get("ok"),
        }
        for label, kind in PATHS.items():
            entry = recovery.get(kind, {})
            row[label] = {
                "path": entry.get("path"),
                "takeover_seconds": entry.get("takeover_seconds"),
                "recovery_seconds": entry.get("recovery_seconds"),
                "lost": entry.get("lost"),
                "duplicated": entry.get("duplicated"),
            }
        restart, copy = (row[label] for label in PATHS)
        row["takeover_ratio_active_vs_restart"] = _ratio(
            copy["takeover_seconds"], restart["takeover_seconds"]
        )
        row["recovery_ratio_active_vs_restart"] = _ratio(
            copy["recovery_seconds"], restart["recovery_seconds"]
        )
        rows.append(row)
        console.print(json.dumps(row, default=str))
    ratios = [r["takeover_ratio_active_vs_restart"] for r in rows]
    known = [r for r in ratios if r is not None]
    return {
        "benchmark": "active_failover",
        "runs": rows,
        "median_takeover_ratio_active_vs_restart": statistics.median(known) if known else None,
        "wall_seconds": round(time.monotonic() - began, 1),
        **provenance("python -m bench.ha.active_failover", load_before),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--runs", type=int, default=1, help="crash runs (minutes each)")
    args = parser.parse_args()
    console = Console(stderr=True)
    results = measure(args.runs, console)
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
