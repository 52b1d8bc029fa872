"""CPU a Spark Python process spends before it can connect back to the JVM: importing the
streaming source runner (what every Python data source query starts) from Spark's zips, as Spark
puts them first on the path, against the installed package the environment's hook leaves
(``spark_jobs.worker_path``). Interleaved pairs in one run; the ratio is what counts (CPU time of
the child, user + system, so the machine's load changes the wall time more than it)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from spark_jobs.worker_path import KEEP_ZIPS, installed

IMPORTS = "import pyspark.worker_util, pyspark.sql.streaming.python_streaming_source_runner"


def _spark_path() -> str:
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return os.pathsep.join(sorted(str(p) for p in lib.glob("*.zip")))


def _cpu_of_one_start(keep_zips: bool) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": _spark_path()}
    env.pop(KEEP_ZIPS, None)
    if keep_zips:
        env[KEEP_ZIPS] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORTS], env=env, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not installed():
        raise SystemExit("the hook is not installed here: run `make venv` first")
    runs: dict[str, list[tuple[float, float]]] = {"zips": [], "installed": []}
    for _ in range(args.repeats):
        runs["zips"].append(_cpu_of_one_start(keep_zips=True))
        runs["installed"].append(_cpu_of_one_start(keep_zips=False))
    summary = {
        kind: {
            "cpu_s_median": statistics.median(c for c, _ in found),
            "wall_s_median": statistics.median(w for _, w in found),
        }
        for kind, found in runs.items()
    }
    ratio = summary["installed"]["cpu_s_median"] / summary["zips"]["cpu_s_median"]
    result = {
        "repeats": args.repeats,
        "load": os.getloadavg(),
        **summary,
        "cpu_ratio_installed_over_zips": ratio,
    }
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
