"""Machine CPU and wall time of one Spark test file with the JVMs' default compilation (C1 + C2)
and with C1 only (``app.java.QUICK_JIT_ENV``), interleaved pairs in one run. The CPU is the
machine's (every process: the JVM is not a waited-for child of pytest), so run it on an otherwise
idle machine; the ratio is what counts."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from app.java import QUICK_JIT_ENV

DEFAULT_FILE = "tests/integration/ha/test_spark_dpc.py"


def _busy_seconds() -> float:
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _one_run(test_file: str, quick: bool) -> dict[str, float]:
    env = dict(os.environ)
    env[QUICK_JIT_ENV] = "1" if quick else ""
    busy, started = _busy_seconds(), time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return {"cpu_s": _busy_seconds() - busy, "wall_s": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--file", default=DEFAULT_FILE)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"default": [], "c1_only": []}
    for pair in range(args.pairs):
        # Alternate which goes first: a warm page cache favours the second of a pair.
        order = [True, False] if pair % 2 == 0 else [False, True]
        for quick in order:
            runs["c1_only" if quick else "default"].append(_one_run(args.file, quick))
    medians = {
        kind: {key: statistics.median(r[key] for r in found) for key in ("cpu_s", "wall_s")}
        for kind, found in runs.items()
    }
    result = {
        "file": args.file,
        "pairs": args.pairs,
        "load_after": os.getloadavg(),
        "runs": runs,
        "medians": medians,
        "cpu_ratio": medians["c1_only"]["cpu_s"] / medians["default"]["cpu_s"],
        "wall_ratio": medians["c1_only"]["wall_s"] / medians["default"]["wall_s"],
    }
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
