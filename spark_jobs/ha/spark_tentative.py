"""The ``tentative`` scenario on a Spark fragment: no stable upstream reachable, C goes on
tentatively within X, then corrects after the heal.

C is a stateful Spark fragment (distinct ports per source and 2 s window) run as a DPC node
(``spark_jobs/runtime/dpc.py``) on two live sources, S1 and S2, each a Flight endpoint that
publishes one bucket per second as the wall clock passes its end. S2 reaches C only through a
fault-injecting TCP proxy (``spark_jobs/ha/faultproxy.py``); the proxy is cut for the failure
and healed after it. S2 has no replica, so while the link is cut no stable copy of its stream is
reachable: C must release its buckets TENTATIVE once the delay budget passes (results keep
coming within X), and after the heal reconcile (redo from the all-stable checkpoint, UNDO, the
corrections, REC_DONE) so that the final stable output equals a failure-free run of the same
input. The run itself is ``spark_dpc.run`` in cut mode; this module shapes its result into the
report of the python engine's ``run_tentative`` (same keys, times in ms since stime 0 of the
data, which is wall time ``t0``).

What differs from the python engine's scenario, on purpose: there is one replica of C (a Spark
fragment here is one query on one driver), so ``switches`` is empty (a consumer switches between
replicas; none exists to switch to) and there is no check that replicas never reconcile at the
same time. Buckets are 1 s (Spark's micro-batches need it), so the failure is whole seconds.

``run(report_dir, timings=None, *, spark=None) -> dict`` writes ``report_dir/report.json``.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from app.availability.sunion import DelayStrategy
from spark_jobs.ha import spark_dpc
from spark_jobs.ha.faultproxy import CutMode


@dataclass(frozen=True)
class SparkTentativeTimings:
    """Durations of the Spark run, in seconds (1 s buckets)."""

    max_delay_s: float = 3.0
    fail_at_s: int = 4
    fail_for_s: int = 8
    # Input published after the heal: the windows after it close and the redo has work.
    tail_s: int = 5
    strategy: str = DelayStrategy.DELAY_EACH.value
    cut_mode: CutMode = "drop"
    # X minus the measured batch time rather than a fixed 0.9 X (DPCSettings.adaptive_budget):
    # on a busy machine a batch takes more than the 0.1 X the fixed budget leaves.
    adaptive_budget: bool = True

    def __post_init__(self) -> None:
        if self.max_delay_s <= 0 or self.fail_at_s < 2 or self.fail_for_s < 1 or self.tail_s < 3:
            raise ValueError(
                "SparkTentativeTimings: need max_delay_s > 0, fail_at_s >= 2 (a baseline "
                f"before the failure), fail_for_s >= 1 and tail_s >= 3; got {self}"
            )
        DelayStrategy(self.strategy)
        if self.cut_mode not in ("refuse", "drop"):
            raise ValueError(f"SparkTentativeTimings.cut_mode: 'refuse' or 'drop', not {self}")

    @property
    def seconds(self) -> int:
        return self.fail_at_s + self.fail_for_s + self.tail_s


def timings_like(t: Any) -> SparkTentativeTimings:
    """The Spark run for the python engine's ``Timings``: the same X, failure (rounded up to
    whole seconds, Spark's buckets), strategy and cut mode."""
    return replace(
        SparkTentativeTimings(),
        max_delay_s=t.max_delay_ms / 1000,
        fail_for_s=max(1, math.ceil(t.fail_for_ms / 1000)),
        strategy=t.strategy,
        cut_mode=t.cut_mode,
    )


def _ms(at: float | None, t0: float) -> int | None:
    return None if at is None else round((at - t0) * 1000)


def _stabilizations(history: list[list[Any]], t0: float) -> list[tuple[int, int | None]]:
    periods: list[tuple[int, int | None]] = []
    start: float | None = None
    for state, at in history:
        if state == "STABILIZATION":
            start = at
        elif start is not None:
            periods.append((round((start - t0) * 1000), _ms(at, t0)))
            start = None
    if start is not None:
        periods.append((round((start - t0) * 1000), None))
    return periods


def report(result: dict[str, Any], timings: SparkTentativeTimings) -> dict[str, Any]:
    """``spark_dpc.run``'s result as the ``tentative`` scenario's report."""
    t0 = float(result["t0"])
    max_delay_ms = round(timings.max_delay_s * 1000)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 1)

    added = ms(result["max_added_latency_s"])
    history = [[state, _ms(at, t0)] for state, at in result["history"]]
    return {
        "scenario": "tentative",
        "engine": "spark",
        "failure_at_ms": _ms(result["failure_at"], t0),
        "heal_at_ms": _ms(result["heal_at"], t0),
        "max_delay_ms": max_delay_ms,
        "strategy": result["strategy"],
        "cut_mode": timings.cut_mode,
        "budget": result["budget"],
        "min_budget_ms": result["min_budget_ms"],
        # One replica of C: nobody to switch to (see the module docstring).
        "switches": [],
        "tentative_tuples": result["tentative_tuples"],
        "tentative_before_heal": result["tentative_before_heal"],
        "corrections": result["corrections"],
        "undos": result["undos"],
        "rec_dones": result["rec_dones"],
        "stabilizations": {"C": _stabilizations(result["history"], t0)},
        "history": {"C": history},
        # The paper's measure: per input bucket, first processed (tentatively or stably) minus
        # the bucket's end, above the median before the failure.
        "max_latency_ms": ms(result["max_latency_s"]),
        "baseline_latency_ms": ms(result["baseline_latency_s"]),
        "max_added_latency_ms": added,
        # Per output row, corrections included (they are new rows sent at the switch).
        "max_added_row_latency_ms": ms(result["max_added_row_latency_s"]),
        "reconciliation_ms": ms(result["reconciliation_s"]),
        "final_state": result["final_state"],
        "difference": {
            "missing_windows": result["missing_windows"],
            "extra_windows": result["extra_windows"],
        },
        "checks": {
            "output_matches_reference": bool(result["output_matches_reference"]),
            "tentative_results_during_failure": result["tentative_tuples"] > 0,
            "added_latency_within_max_delay": added is not None and added <= max_delay_ms,
            "corrected_after_heal": result["undos"] >= 1
            and result["rec_dones"] >= 1
            and result["final_state"] == "STABLE",
        },
    }


def run(
    report_dir: Path,
    timings: SparkTentativeTimings | None = None,
    *,
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """Run the scenario (a failure-free reference, then the cut run, same input), write
    ``report_dir/report.json`` and return the report. ``spark``: a session to use (one is
    built and stopped here otherwise)."""
    t = timings or SparkTentativeTimings()
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    own = spark is None
    if spark is None:
        from spark_jobs.session import build_session

        spark = build_session(app_name="spark-tentative", master="local[2]", shuffle_partitions=2)
    try:
        with tempfile.TemporaryDirectory(dir=report_dir) as tmp:
            root = Path(tmp)
            expected = spark_dpc.reference(spark, root, t.seconds)
            result = spark_dpc.run(
                spark,
                root,
                failure=t.fail_for_s,
                strategy=DelayStrategy(t.strategy),
                expected=expected,
                seconds=t.seconds,
                fail_at=t.fail_at_s,
                max_delay=t.max_delay_s,
                mode="cut",
                cut_mode=t.cut_mode,
                adaptive_budget=t.adaptive_budget,
            )
    finally:
        if own:
            spark.stop()
    out = report(result, t)
    out["timings"] = asdict(t)
    out["reference_rows"] = len(expected)
    out["ok"] = all(out["checks"].values())
    (report_dir / "report.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


__all__ = ["SparkTentativeTimings", "report", "run", "timings_like"]
