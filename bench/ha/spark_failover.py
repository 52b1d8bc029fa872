"""Failover on Spark: recovery time per technique, and each technique's runtime overhead.

PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
  .venv/bin/python -m bench.ha.spark_failover [--json FILE] [--quick]

The crash scenario on Spark (``spark_jobs/ha/spark_crash.py``), one run at a time so that no
other JVM boots during a run. First, with nothing failing, the topology with no HA (A -> B -> C,
no backup) and with each technique (its backup running, shipping or holding input); then each
technique again with B SIGKILLed.
Per technique: detection (kill -> the heartbeat detector says failed), take-over (kill -> B2
committed and resumed), recovery (kill -> C's input frontier passes where it was at the kill),
maximum added latency of a window at C, checkpoint bytes shipped. Overhead: the CPU seconds of
every process (A, B's and B2's whole sessions: Python, JVM, workers) to process the whole input,
as a ratio to the no-HA run; also over the fixed window t0 to ``fail_at_s`` (on a busy machine a
starved process does less in a fixed window, so that one understates).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ha.provenance import load_average, provenance, seconds
from spark_jobs.ha.spark_crash import TECHNIQUES, SparkCrashTimings, run_technique


def _recovery_row(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "technique": result["technique"],
        "detection_ms": result.get("detection_ms"),
        "take_over_ms": result.get("take_over_ms"),
        "recovery_ms": result.get("recovery_ms"),
        "baseline_latency_ms": result.get("baseline_latency_ms"),
        "max_added_latency_ms": result.get("max_added_latency_ms"),
        "checkpoint_bytes": result.get("checkpoint_bytes", 0),
        "checkpoints_shipped": result.get("checkpoints_shipped", 0),
        "delta_shipments": result.get("delta_shipments", 0),
        "shipped_bytes": result.get("shipped_bytes", 0),
        "whole_pack_bytes": result.get("whole_pack_bytes", 0),
        "checks_passed": all(result["checks"].values()),
    }


def _overhead_row(result: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    whole, window = result["total_cpu_seconds_whole_run"], result["total_cpu_seconds"]
    return {
        "technique": result["technique"],
        "cpu_seconds_whole_run": whole,
        "cpu_ratio_vs_no_ha": round(whole / baseline["total_cpu_seconds_whole_run"], 2),
        "cpu_seconds_to_fail_at": window,
        "window_ratio_vs_no_ha": round(window / baseline["total_cpu_seconds"], 2),
        "median_latency_ms": result.get("baseline_latency_ms"),
        "checks_passed": all(result["checks"].values()),
    }


def _tables(recovery: list[dict[str, Any]], overhead: list[dict[str, Any]]) -> str:
    lines = [
        "| technique | detection | take-over | recovery | baseline latency | max added latency "
        "| checkpoint (last) | shipped: sent / whole packs (deltas) | checks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in recovery:
        checkpoint, shipped = "0", "0"
        if row["checkpoints_shipped"]:
            checkpoint = f"{row['checkpoint_bytes']:,}"
            ratio = row["shipped_bytes"] / max(1, row["whole_pack_bytes"])
            shipped = (
                f"{row['shipped_bytes']:,} / {row['whole_pack_bytes']:,} = {ratio:.2f} "
                f"({row['delta_shipments']} of {row['checkpoints_shipped']})"
            )
        lines.append(
            f"| {row['technique'].replace('_', ' ')} | {seconds(row['detection_ms'])} "
            f"| {seconds(row['take_over_ms'])} | {seconds(row['recovery_ms'])} "
            f"| {seconds(row['baseline_latency_ms'])} "
            f"| {seconds(row['max_added_latency_ms'])} | {checkpoint} | {shipped} "
            f"| {'pass' if row['checks_passed'] else 'FAIL'} |"
        )
    lines += [
        "",
        "| technique (no failure) | CPU, whole input | vs no HA | CPU, t0 to fail_at | vs no HA "
        "| median latency | checks |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in overhead:
        lines.append(
            f"| {row['technique'].replace('_', ' ')} | {row['cpu_seconds_whole_run']:.2f} s "
            f"| {row['cpu_ratio_vs_no_ha']} | {row['cpu_seconds_to_fail_at']:.2f} s "
            f"| {row['window_ratio_vs_no_ha']} | {seconds(row['median_latency_ms'])} "
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
    load_before = load_average()
    steady: list[dict[str, Any]] = []
    crashed: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="spark-failover-") as tmp:
        # Overhead first, with nothing failing; then one crash per technique.
        for technique in ("none", *TECHNIQUES):
            result = run_technique(
                timings, Path(tmp) / f"steady-{technique}", technique, fail=False
            )
            print(json.dumps({k: v for k, v in result.items() if k != "switches"}), flush=True)
            steady.append(result)
        for technique in TECHNIQUES:
            result = run_technique(timings, Path(tmp) / f"crash-{technique}", technique)
            print(json.dumps({k: v for k, v in result.items() if k != "switches"}), flush=True)
            crashed.append(result)
    recovery = [_recovery_row(result) for result in crashed]
    overhead = [_overhead_row(result, steady[0]) for result in steady]
    summary = {
        **provenance(
            "python -m bench.ha.spark_failover" + (" --quick" if args.quick else ""), load_before
        ),
        "seconds": round(time.time() - began, 1),
        "timings": timings.__dict__,
        "recovery": recovery,
        "overhead": overhead,
        "runs": {"steady": steady, "crash": crashed},
    }
    print(_tables(recovery, overhead))
    print(
        f"load average {summary['load_average_before']} -> {summary['load_average_after']}, "
        f"{summary['seconds']} s, commit {summary['commit']}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0 if all(row["checks_passed"] for row in recovery + overhead) else 1


if __name__ == "__main__":
    raise SystemExit(main())
