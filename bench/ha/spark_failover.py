"""Failover on Spark: recovery time per technique, and each technique's runtime overhead.

PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
  .venv/bin/python -m bench.ha.spark_failover [--json FILE] [--quick]

The crash scenario on Spark (``spark_jobs/ha/spark_crash.py``), one technique at a time so that
no other JVM boots during a run: first the same topology with no HA (A -> B -> C, no backup, no
failure), then upstream backup, passive standby and active standby, each with B SIGKILLed.
Per technique: detection (kill -> the heartbeat detector says failed), take-over (kill -> B2
committed and resumed), recovery (kill -> C's input frontier passes where it was at the kill),
maximum added latency of a window at C, checkpoint bytes shipped, and the CPU seconds of every
process (A, B's and B2's whole sessions: Python, JVM, workers) from t0 to ``fail_at_s``, while
nothing has failed yet, as a ratio to the no-HA run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_jobs.ha.spark_crash import TECHNIQUES, SparkCrashTimings, run_technique


def _commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or "unknown"


def _row(result: dict[str, Any], baseline_cpu: float) -> dict[str, Any]:
    cpu = result["total_cpu_seconds"]
    return {
        "technique": result["technique"],
        "detection_ms": result.get("detection_ms"),
        "take_over_ms": result.get("take_over_ms"),
        "recovery_ms": result.get("recovery_ms"),
        "max_added_latency_ms": result.get("max_added_latency_ms"),
        "baseline_latency_ms": result.get("baseline_latency_ms"),
        "checkpoint_bytes": result.get("checkpoint_bytes", 0),
        "checkpoints_shipped": result.get("checkpoints_shipped", 0),
        "cpu_seconds": cpu,
        "cpu_ratio_vs_no_ha": round(cpu / baseline_cpu, 2) if baseline_cpu else None,
        "checks_passed": all(result["checks"].values()),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    def seconds(ms: float | None) -> str:
        return "-" if ms is None else f"{ms / 1000:.2f} s"

    lines = [
        "| technique | detection | take-over | recovery | max added latency | checkpoint bytes "
        "| CPU (t0 to fail) | vs no HA | checks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        shipped = (
            f"{row['checkpoint_bytes']:,} x {row['checkpoints_shipped']}"
            if row["checkpoints_shipped"]
            else "0"
        )
        lines.append(
            f"| {row['technique'].replace('_', ' ')} | {seconds(row['detection_ms'])} "
            f"| {seconds(row['take_over_ms'])} | {seconds(row['recovery_ms'])} "
            f"| {seconds(row['max_added_latency_ms'])} | {shipped} "
            f"| {row['cpu_seconds']:.2f} s | {row['cpu_ratio_vs_no_ha']} "
            f"| {'pass' if row['checks_passed'] else 'FAIL'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="10 s of input, kill at 5 s")
    args = parser.parse_args(argv)
    timings = SparkCrashTimings.quick() if args.quick else SparkCrashTimings()
    began = time.time()
    load_before = os.getloadavg()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="spark-failover-") as tmp:
        for technique in ("none", *TECHNIQUES):
            result = run_technique(timings, Path(tmp) / technique, technique)
            print(json.dumps({k: v for k, v in result.items() if k != "switches"}), flush=True)
            results.append(result)
    baseline_cpu = results[0]["total_cpu_seconds"]
    rows = [_row(result, baseline_cpu) for result in results]
    summary = {
        "command": "python -m bench.ha.spark_failover" + (" --quick" if args.quick else ""),
        "commit": _commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.time() - began, 1),
        "timings": timings.__dict__,
        "rows": rows,
        "runs": results,
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
