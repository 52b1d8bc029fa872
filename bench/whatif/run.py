"""What-if benchmark: sweep throughput, the 100,000-participant federation, and BPM's quality.

python -m bench.whatif.run [--participants 40] [--tasks 20] [--seeds 40] [--repeats 3] [--json FILE]

1. Sweep throughput. One sweep of generated federations (k = 1..10 x price-range widths
   0, 5, 10, 15, 20% x seeds; 2,000 simulations by default) run twice in the same process: one
   simulation after another in this Python process, then on Spark local[2] (session started and
   warmed up before the clock starts). Throughput ratio = Spark sims/s over in-process sims/s;
   the two result tables must be identical.
2. The very large federation: 100,000 participants, k = 10, simulated in rounds with Spark
   DataFrames (spark_jobs/whatif/large.py): seconds per round, rounds to acceptable, peak RSS of
   the driver (Python), the JVM and its Python workers. The same rounds in NumPy on the same
   federation are timed as a reference (they must give the same final loads).
3. Quality, from the sweep of part 1 (all federations underloaded: total load 70% of the total of
   thresholds): fraction reaching an acceptable allocation per (k, width), where it first reaches
   95%, and the final cost over the lower bound. The round algorithm's quality on 1,000-participant
   federations is measured the same way for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from app.market.rounds import generate_large, run_rounds, water_filling_bound
from spark_jobs.session import build_session
from spark_jobs.whatif.sweep import run_in_process, run_on_spark
from spark_jobs.whatif.sweep_file import GridSweep, parse_sweep

WIDTHS = [0.0, 0.05, 0.1, 0.15, 0.2]
KS = list(range(1, 11))


def quality_sweep(participants: int, seeds: int, max_steps: int, tasks: int = 20) -> GridSweep:
    text = f"""
sweep: bench-quality
grid:
  participants: {participants}
  contracts_per_participant: {KS}
  price_range_width: {WIDTHS}
  load_skew: 1.0
  capacity_spread: 0.5
  tasks_per_participant: {tasks}
  overload: 0.7
seeds: {seeds}
max_steps: {max_steps}
"""
    sweep = parse_sweep(text, source="bench/whatif/run.py")
    assert isinstance(sweep, GridSweep)
    return sweep


def _progress(label: str, total: int) -> Any:
    state = {"last": 0.0}

    def report(done: int) -> None:
        now = time.monotonic()
        if done == total or now - state["last"] > 10:
            state["last"] = now
            print(f"  {label}: {done}/{total}", flush=True)

    return report


def _load_average() -> float:
    return os.getloadavg()[0]


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every live descendant, including what their
    reaped children used: for the Spark path the driver, the JVM and its Python workers (the
    daemon's forked workers are counted by the daemon when they exit). Read from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(v) for v in fields[11:15]) / ticks
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


def bench_sweep(spark: Any, sweep: GridSweep, repeats: int) -> tuple[dict[str, Any], pd.DataFrame]:
    """Interleaved runs (in-process, Spark, in-process, Spark, ...): the machine is shared, and
    interleaving exposes each pair to about the same background load; the median of the paired
    ratios is reported."""
    first = sweep.row(0)
    warm = quality_sweep(
        first["participants"], 1, sweep.max_steps or 600, first["tasks_per_participant"]
    )
    run_on_spark(spark, GridSweep(warm.name, "", warm.axes, (0,), warm.max_steps))
    runs: list[dict[str, float]] = []
    identical = True
    on_spark = local = pd.DataFrame()
    for repeat in range(repeats):
        load_before = _load_average()
        began, cpu = time.perf_counter(), time.process_time()
        local = run_in_process(sweep, _progress(f"in-process #{repeat + 1}", sweep.size))
        local_s, local_cpu = time.perf_counter() - began, time.process_time() - cpu
        began, cpu = time.perf_counter(), _tree_cpu_seconds(os.getpid())
        on_spark = run_on_spark(spark, sweep, _progress(f"spark #{repeat + 1}", sweep.size))
        spark_s = time.perf_counter() - began
        # Everything the Spark path burnt (driver, JVM, workers): the per-CPU-second figure does
        # not depend on how many cores the machine lends it.
        spark_cpu = _tree_cpu_seconds(os.getpid()) - cpu
        runs.append(
            {
                "in_process_s": local_s,
                "spark_s": spark_s,
                "ratio": local_s / spark_s,
                "in_process_cpu_s": local_cpu,
                "spark_cpu_s": spark_cpu,
                "in_process_per_cpu_s": sweep.size / local_cpu,
                "spark_per_cpu_s": sweep.size / spark_cpu,
                "load_average_before": load_before,
                "load_average_after": _load_average(),
            }
        )
        print(
            f"  run {repeat + 1}: in-process {local_s:.1f} s ({local_cpu:.1f} CPU s), "
            f"Spark {spark_s:.1f} s ({spark_cpu:.1f} CPU s)",
            flush=True,
        )
        try:
            pd.testing.assert_frame_equal(local, on_spark)
        except AssertionError:
            identical = False
    local_s = statistics.median(r["in_process_s"] for r in runs)
    spark_s = statistics.median(r["spark_s"] for r in runs)
    return (
        {
            "simulations": sweep.size,
            "repeats": repeats,
            "in_process_s": local_s,
            "spark_s": spark_s,
            "in_process_per_s": sweep.size / local_s,
            "spark_per_s": sweep.size / spark_s,
            # Each in-process run and the Spark run after it share the background load of the
            # machine, so the paired ratio is the figure; medians of the times are context.
            "ratio": statistics.median(r["ratio"] for r in runs),
            "in_process_per_cpu_s": statistics.median(r["in_process_per_cpu_s"] for r in runs),
            "spark_per_cpu_s": statistics.median(r["spark_per_cpu_s"] for r in runs),
            "runs": runs,
            "identical_results": identical,
            "errors": int(on_spark["error"].notna().sum()),
        },
        on_spark,
    )


def quality(results: pd.DataFrame) -> dict[str, Any]:
    ok = results[results["error"].isna()].copy()
    ok["acceptable"] = ok["acceptable"].astype(bool)
    table = ok.groupby(["price_range_width", "contracts_per_participant"]).agg(
        fraction=("acceptable", "mean"),
        cost_ratio=("cost_ratio", "median"),
        steps=("steps_to_acceptable", "median"),
    )
    return _quality_table(table)


def _quality_table(table: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {"by_width": {}}
    for width, rows in table.groupby(level=0):
        rows = rows.droplevel(0)
        reaching = [int(k) for k, f in rows["fraction"].items() if f >= 0.95]
        out["by_width"][f"{float(width):.2f}"] = {
            "fraction_by_k": {int(k): round(float(v), 3) for k, v in rows["fraction"].items()},
            "median_cost_ratio_by_k": {
                int(k): None if pd.isna(v) else round(float(v), 3)
                for k, v in rows["cost_ratio"].items()
            },
            "first_k_at_95pct": min(reaching) if reaching else None,
        }
    return out


def round_quality(participants: int, seeds: int) -> dict[str, Any]:
    rows = []
    for width in WIDTHS:
        for k in KS:
            for seed in range(seeds):
                n = participants + (participants % 2)
                fed = generate_large(
                    participants=n,
                    contracts_per_participant=k,
                    price_range_width=width,
                    load_skew=1.0,
                    capacity_spread=0.3,
                    utilisation=0.7,
                    seed=seed,
                )
                result = run_rounds(fed, max_rounds=300)
                cost = result.rounds[-1].cost if result.rounds else result.initial_cost
                rows.append(
                    {
                        "price_range_width": width,
                        "contracts_per_participant": k,
                        "acceptable": result.acceptable,
                        "cost_ratio": cost / water_filling_bound(fed),
                        "steps_to_acceptable": result.rounds_to_acceptable,
                    }
                )
    frame = pd.DataFrame(rows)
    frame["steps_to_acceptable"] = pd.to_numeric(frame["steps_to_acceptable"])
    table = frame.groupby(["price_range_width", "contracts_per_participant"]).agg(
        fraction=("acceptable", "mean"),
        cost_ratio=("cost_ratio", "median"),
        steps=("steps_to_acceptable", "median"),
    )
    return _quality_table(table)


class PeakRss:
    """Samples the resident memory of this process, the JVM and the JVM's children (the Python
    workers) every 0.2 s; keeps the peak of each and of their sum."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid = jvm_pid
        self.peak = {"driver_python": 0, "jvm": 0, "python_workers": 0, "total": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError):
            return 0

    def _children(self, pid: int) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry))
        return found

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            driver = self._rss(os.getpid())
            jvm = self._rss(self.jvm_pid)
            workers = 0
            stack = self._children(self.jvm_pid)
            while stack:
                pid = stack.pop()
                workers += self._rss(pid)
                stack.extend(self._children(pid))
            sample = {
                "driver_python": driver,
                "jvm": jvm,
                "python_workers": workers,
                "total": driver + jvm + workers,
            }
            for key, value in sample.items():
                self.peak[key] = max(self.peak[key], value)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def bench_large(spark: Any, participants: int, k: int, max_rounds: int) -> dict[str, Any]:
    from spark_jobs.whatif.large import run_rounds as spark_rounds

    fed = generate_large(
        participants=participants,
        contracts_per_participant=k,
        price_range_width=0.1,
        load_skew=1.0,
        capacity_spread=0.3,
        utilisation=0.7,
        seed=1,
    )
    began = time.perf_counter()
    reference = run_rounds(fed, max_rounds=max_rounds)
    numpy_s = time.perf_counter() - began
    jvm_pid = spark.sparkContext._gateway.proc.pid
    with PeakRss(jvm_pid) as rss:
        began = time.perf_counter()
        result = spark_rounds(
            spark,
            fed,
            max_rounds=max_rounds,
            on_round=lambda r, s: print(
                f"  round {r.round}: {r.above_threshold} above threshold, "
                f"{r.units_moved} units moved, {s:.1f} s",
                flush=True,
            ),
        )
        spark_s = time.perf_counter() - began
    same = bool(np.array_equal(result.final_load, reference.final_load))
    per_round = result.seconds_per_round
    return {
        "participants": participants,
        "contracts": int(fed.edge_a.size),
        "k": k,
        "rounds": len(result.rounds),
        "rounds_to_acceptable": result.rounds_to_acceptable,
        "acceptable": result.acceptable,
        "seconds_per_round_median": float(np.median(per_round)) if per_round else None,
        "seconds_per_round": per_round,
        "spark_total_s": spark_s,
        "numpy_total_s": numpy_s,
        "numpy_seconds_per_round": numpy_s / max(len(reference.rounds), 1),
        "same_final_loads_as_numpy": same,
        "initial_cost": result.initial_cost,
        "final_cost": result.rounds[-1].cost if result.rounds else result.initial_cost,
        "cost_lower_bound": water_filling_bound(fed),
        "peak_rss_mib": {key: value / 2**20 for key, value in rss.peak.items()},
        "driver_python_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def machine() -> dict[str, Any]:
    import pyspark

    try:
        java = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, check=False
        ).stderr.splitlines()[0]
    except OSError:
        java = "?"
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "pyspark": pyspark.__version__,
        "java": java,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--participants", type=int, default=40, help="per swept federation")
    parser.add_argument("--tasks", type=int, default=20, help="tasks per participant (sweep)")
    parser.add_argument("--seeds", type=int, default=40, help="seeds per (k, width)")
    parser.add_argument("--max-steps", type=int, default=600, help="steps per simulation")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved sweep runs per path")
    parser.add_argument("--large", type=int, default=100_000, help="participants, part 2")
    parser.add_argument("--large-k", type=int, default=10)
    parser.add_argument("--max-rounds", type=int, default=100)
    parser.add_argument("--round-participants", type=int, default=1000, help="part 3 (rounds)")
    parser.add_argument("--round-seeds", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--parts",
        default="sweep,large,rounds",
        help=(
            "comma-separated subset of sweep (throughput and simulator quality), large, rounds; "
            "parts not run keep their previous figures from --json, marked as carried over"
        ),
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    unknown = parts - {"sweep", "large", "rounds"}
    if unknown:
        parser.error(f"--parts: unknown part(s) {sorted(unknown)}")
    previous: dict[str, Any] = {}
    if args.json and args.json.exists():
        previous = json.loads(args.json.read_text())
    sweep = quality_sweep(args.participants, args.seeds, args.max_steps, args.tasks)
    spark = build_session(
        app_name="fedload-bench-whatif",
        master="local[2]",
        shuffle_partitions=4,
        extra={"spark.driver.memory": "4g"},
    )
    throughput: dict[str, Any] | None = None
    large: dict[str, Any] | None = None
    simulator_quality: dict[str, Any] | None = None
    try:
        if "sweep" in parts:
            print(f"sweep: {sweep.size} simulations", flush=True)
            throughput, results = bench_sweep(spark, sweep, args.repeats)
            simulator_quality = quality(results)
            print(
                f"sweep throughput: Spark local[2] {throughput['spark_per_s']:.1f} sims/s vs "
                f"one process {throughput['in_process_per_s']:.1f} sims/s: ratio "
                f"{throughput['ratio']:.2f}; per CPU second {throughput['spark_per_cpu_s']:.1f}"
                f" vs {throughput['in_process_per_cpu_s']:.1f} (identical results: "
                f"{throughput['identical_results']})",
                flush=True,
            )
        if "large" in parts:
            print(f"large federation: {args.large} participants, k = {args.large_k}", flush=True)
            large = bench_large(spark, args.large, args.large_k, args.max_rounds)
            print(
                f"large: {large['seconds_per_round_median']:.1f} s per round (median), "
                f"acceptable after {large['rounds_to_acceptable']} rounds, peak RSS "
                f"{large['peak_rss_mib']['total']:.0f} MiB",
                flush=True,
            )
    finally:
        spark.stop()
    rounds_quality = None
    if "rounds" in parts:
        print("quality of the round algorithm", flush=True)
        rounds_quality = round_quality(args.round_participants, args.round_seeds)
    fresh = {
        "sweep": throughput,
        "large": large,
        "quality_simulator": simulator_quality,
        "quality_rounds": rounds_quality,
    }
    carried = sorted(k for k, v in fresh.items() if v is None and k in previous)
    result = {
        "machine": machine(),
        "args": vars(args) | {"json": None},
        **{k: v if v is not None else previous.get(k) for k, v in fresh.items()},
        "carried_over_from_previous_run": carried,
    }
    print(json.dumps(result, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
