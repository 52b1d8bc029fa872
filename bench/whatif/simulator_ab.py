"""Simulations per second of the per-task simulator before and after a change, same run.

PYTHONPATH=. .venv/bin/python -m bench.whatif.simulator_ab [--before 39970ab] [--seeds 2]
    [--repeats 3]

The ``--before`` revision's code is exported (``git archive``) to a temporary directory; each
repeat then runs the same federations (the sweep benchmark's grid: 40 participants, 20 tasks,
k = 1..10, widths 0-20%, ``--seeds`` seeds per cell, at most 600 steps, no trace) in two child
processes, one per revision, alternately (before, after, before, after, ...), so both see about
the same background load. Each child reports the CPU seconds of its simulations
(``time.process_time``, imports and federation generation excluded) and their wall seconds;
CPU time is the steadier figure on a shared machine. Both children also return a digest of every
result, which must be equal: the change may make the simulator faster, not different.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

KS = range(1, 11)
WIDTHS = (0.0, 0.05, 0.1, 0.15, 0.2)


def _worker(seeds: int) -> None:
    from app.market.generate import generate_federation
    from app.market.simulator import simulate

    docs = [
        generate_federation(
            participants=40,
            contracts_per_participant=k,
            price_range_width=w,
            load_skew=1.0,
            capacity_spread=0.5,
            seed=s,
            tasks_per_participant=20,
            overload=0.7,
        )
        for k in KS
        for w in WIDTHS
        for s in range(seeds)
    ]
    digest = hashlib.sha256()
    cpu, wall = time.process_time(), time.perf_counter()
    for doc in docs:
        r = simulate(doc, max_steps=600, record_trace=False)
        digest.update(repr((r.summary(), r.net_payments, len(r.move_log))).encode())
    print(
        json.dumps(
            {
                "simulations": len(docs),
                "cpu_s": time.process_time() - cpu,
                "wall_s": time.perf_counter() - wall,
                "digest": digest.hexdigest()[:16],
            }
        )
    )


def _child(code: Path, seeds: int) -> dict[str, float | str]:
    env = dict(os.environ, PYTHONPATH=str(code))
    out = subprocess.run(
        [sys.executable, "-c", f"from bench.whatif.simulator_ab import _worker; _worker({seeds})"],
        env=env,
        cwd=code,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", default="39970ab", help="git revision of the old simulator")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    here = Path.cwd()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.before, "app", "spark_jobs"], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        # The worker itself is this file, whichever revision's simulator it imports.
        (Path(tmp) / "bench" / "whatif").mkdir(parents=True)
        for name in (
            "bench/__init__.py",
            "bench/whatif/__init__.py",
            "bench/whatif/simulator_ab.py",
        ):
            (Path(tmp) / name).write_text((here / name).read_text())
        runs: list[dict[str, Any]] = []
        for repeat in range(args.repeats):
            load = os.getloadavg()[0]
            before = _child(Path(tmp), args.seeds)
            after = _child(here, args.seeds)
            runs.append(
                {
                    "before": before,
                    "after": after,
                    "load_before": load,
                    "load_after": os.getloadavg()[0],
                }
            )
            print(
                f"run {repeat + 1}: before {before['cpu_s']:.1f} s CPU ({before['wall_s']:.1f} "
                f"s wall), after {after['cpu_s']:.1f} s CPU ({after['wall_s']:.1f} s wall), "
                f"same results: {before['digest'] == after['digest']}, load average "
                f"{load:.1f} -> {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    n = runs[0]["before"]["simulations"]
    cpu_ratio = statistics.median(r["before"]["cpu_s"] / r["after"]["cpu_s"] for r in runs)
    wall_ratio = statistics.median(r["before"]["wall_s"] / r["after"]["wall_s"] for r in runs)
    same = all(r["before"]["digest"] == r["after"]["digest"] for r in runs)
    before_rate = n / statistics.median(r["before"]["cpu_s"] for r in runs)
    after_rate = n / statistics.median(r["after"]["cpu_s"] for r in runs)
    print(
        f"{n} simulations per run: {before_rate:.1f} -> {after_rate:.1f} simulations per CPU "
        f"second; median paired speed-up {cpu_ratio:.2f}x CPU, {wall_ratio:.2f}x wall; "
        f"identical results: {same}"
    )


if __name__ == "__main__":
    main()
