"""Partition on Spark: how long C takes to leave a cut-off replica, and what the switch costs.

PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
  .venv/bin/python -m bench.ha.spark_partition [--runs N] [--cut-mode drop|refuse] [--json FILE]

The ``partition`` scenario on Spark (``spark_jobs/ha/spark_partition.py``), run after run: A
feeds B and its replica R (two Spark host processes), C reads through one fault-injecting TCP
proxy per replica, and the B-C link is cut for ``fail_for_s`` then healed. Per run: detection
(cut -> C's heartbeats declare B failed and C switches to R), the number of switches (one; a
replica declared failed while its link was up, a false suspicion, adds more), rows through each
replica, how long after the heal B answered C's heartbeats again, the maximum added
latency of a window at C, tentative tuples (none: a stable replica was reachable), and whether
every check passed (output equal to the failure-free run, no duplicates, C still on R after the
heal).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.ha.provenance import load_average, provenance, seconds
from spark_jobs.ha.spark_partition import SparkPartitionTimings, run


def _row(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "cut_mode": report["cut_mode"],
        "fail_for_ms": report["heal_at_ms"] - report["failure_at_ms"],
        "detection_ms": report["detected_after_ms"],
        "switches": len(report["switches"]),
        "false_suspicions": report["false_suspicions"],
        "longest_silence_ms": report["longest_silence_on_live_link_ms"],
        "rows_by_replica": report["rows_by_replica"],
        "rows_after_heal": report["rows_after_heal"],
        "b_back_after_heal_ms": report["b_heard_again_after_heal_ms"],
        "baseline_latency_ms": report["baseline_latency_ms"],
        "max_added_latency_ms": report["max_added_latency_ms"],
        "tentative_tuples": report["tentative_tuples"],
        "checks_passed": all(report["checks"].values()),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | cut | failure | detection + switch | switches | false suspicions "
        "| longest silence B / R | rows via B / via R | rows after heal | B answers again "
        "| baseline latency | max added latency | tentative | checks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, row in enumerate(rows, 1):
        via = row["rows_by_replica"]
        silence = row["longest_silence_ms"]
        lines.append(
            f"| {i} | {row['cut_mode']} | {seconds(row['fail_for_ms'])} "
            f"| {seconds(row['detection_ms'])} "
            f"| {row['switches']} | {row['false_suspicions']} "
            f"| {silence['B']} / {silence['R']} ms | {via['B']} / {via['R']} "
            f"| {row['rows_after_heal']} | {seconds(row['b_back_after_heal_ms'])} "
            f"| {seconds(row['baseline_latency_ms'])} "
            f"| {seconds(row['max_added_latency_ms'])} | {row['tentative_tuples']} "
            f"| {'pass' if row['checks_passed'] else 'FAIL'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cut-mode", choices=("drop", "refuse"), default="drop")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    timings = replace(SparkPartitionTimings(), cut_mode=args.cut_mode)
    began = time.time()
    load_before = load_average()
    reports: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="spark-partition-") as tmp:
        for i in range(args.runs):
            report = run(Path(tmp) / f"run-{i}", timings)
            print(json.dumps({"run": i + 1, **_row(report)}), flush=True)
            reports.append(report)
    rows = [_row(report) for report in reports]
    summary = {
        **provenance(
            f"python -m bench.ha.spark_partition --runs {args.runs} --cut-mode {args.cut_mode}",
            load_before,
        ),
        "seconds": round(time.time() - began, 1),
        "timings": asdict(timings),
        "rows": rows,
        "runs": reports,
    }
    print(_table(rows))
    print(
        f"load average {summary['load_average_before']} -> {summary['load_average_after']}, "
        f"{summary['seconds']} s, commit {summary['commit']}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0 if all(row["checks_passed"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
