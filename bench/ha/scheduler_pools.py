"""FIFO against FAIR scheduling inside each agent's Spark, same run, at the paper's settings.

Session 29 found the copies' serving batches stretching from ~2 s to 4-6 s while a DPC redo
batch runs (bench/ha/README.md, "Session 29"): in one Spark, FIFO scheduling runs every task of
the redo's batch (up to 20 s of input, the first one restoring the state) before the tasks of a
serving batch submitted after it. Every query now starts in a scheduler pool of its own
(``FragmentRuntime._launch``), so ``spark.scheduler.mode=FAIR`` (an agent's ``--spark-conf``)
shares the cores between the serving query and the redo task by task. This runs the tentative
scenario per failure length twice, FIFO (Spark's default) then FAIR, back to back, and prints
per copy the maximum added latency, the first version's (either copy's, what a consumer reading
the copy ahead sees) and the redo's time, with FAIR's over FIFO's as a ratio.

    PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
      .venv/bin/python -m bench.ha.scheduler_pools --failures 4 8 [--json FILE] [--workdir DIR]

Paper settings are the defaults here: 3 streams, 100 ms buckets, X = 3 s, 300 rows/s a source.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.ha.agents_failures import one_run

DEFAULT_JSON = Path(__file__).with_name("scheduler_pools.json")
MODES = ("FIFO", "FAIR")


def _max_added_ms(run: dict[str, Any]) -> dict[str, float | None]:
    """Per copy its maximum added latency, and the first version's, in ms (None: no figure)."""
    if "error" in run:
        return {}
    out: dict[str, float | None] = {
        holder: copy["max_added_latency_ms"] for holder, copy in run["copies"].items()
    }
    out["first version"] = (run.get("first_version") or {}).get("max_added_latency_ms")
    return out


def _redo_ms(run: dict[str, Any]) -> dict[str, float | None]:
    if "error" in run:
        return {}
    return {holder: copy["redo_ms"] for holder, copy in run["copies"].items()}


def ratio(fair: float | None, fifo: float | None) -> str:
    if fair is None or fifo is None or fifo <= 0:
        return "-"
    return f"{fair / fifo:.2f}"


def table(pairs: list[dict[str, Any]], console: Console) -> None:
    out = Table(title="FIFO vs FAIR scheduling in each agent's Spark (tentative scenario)")
    for column in ("failure", "what", "FIFO s", "FAIR s", "FAIR / FIFO"):
        out.add_column(column)
    for pair in pairs:
        fifo, fair = pair["FIFO"], pair["FAIR"]
        for label, pick in (("max added", _max_added_ms), ("redo", _redo_ms)):
            a, b = pick(fifo), pick(fair)
            for key in sorted(set(a) | set(b)):
                x, y = a.get(key), b.get(key)
                out.add_row(
                    f"{pair['fail_for_s']:g} s",
                    f"{label}, {key}",
                    "-" if x is None else f"{x / 1000:.2f}",
                    "-" if y is None else f"{y / 1000:.2f}",
                    ratio(y, x),
                )
    console.print(out)
    # Below the table, not in it: a check's name is wider than any figure.
    for pair in pairs:
        for mode in MODES:
            run = pair[mode]
            if "error" in run:
                console.print(f"{pair['fail_for_s']:g} s, {mode}: failed: {run['error']}")
            elif not run["ok"]:
                failed = ", ".join(name for name, passed in run["checks"].items() if not passed)
                console.print(f"{pair['fail_for_s']:g} s, {mode}: checks failed: {failed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--failures", type=float, nargs="+", default=[4.0, 8.0])
    parser.add_argument("--rate", type=int, default=300, help="rows per second of each source")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--reconcile-timeout", type=float, default=420.0)
    args = parser.parse_args()
    args.streams, args.bucket_seconds, args.max_delay = 3, 0.1, 3.0
    console = Console(width=None if os.isatty(1) else 140)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fedload-pools-"))
    code = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    pairs: list[dict[str, Any]] = []
    for fail_for_s in args.failures:
        pair: dict[str, Any] = {"fail_for_s": fail_for_s}
        for mode in MODES:
            console.rule(f"{fail_for_s:g} s failure, {mode}")
            conf = (("spark.scheduler.mode", mode),)
            run = one_run(fail_for_s, args.rate, 0, args, work, console, spark_conf=conf)
            pair[mode] = run | {"code": code}
        pairs.append(pair)
        args.json.write_text(
            json.dumps(
                {
                    "pairs": pairs,
                    "machine": {"machine": platform.machine(), "nproc": os.cpu_count()},
                },
                indent=2,
                default=str,
            )
        )
    table(pairs, console)
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
