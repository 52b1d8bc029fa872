"""The SUnion reader alone (no Spark), at an earlier commit and now, interleaved in one process.

python -m bench.runtime.reader_ab --before COMMIT [--repeats 5] [--mode dpc] [--json FILE]

The reader at ``--before`` is ``git show COMMIT:spark_jobs/runtime/sunion.py`` loaded as a
module of its own; both readers plan and read the same backlog as ``bucket_cost`` (three inputs,
300 rows/s, 24 s, 4 s of input per batch) at 1 s and 0.1 s buckets, alternating, so both see the
same load. Wall time per second of input, planning (``latestOffset`` + ``partitions``, with the
spool in DPC mode) and reading (every partition's ``read``) apart; medians over the repeats.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.runtime import bucket_cost
from spark_jobs.fragments import CONNECTION_SCHEMA
from spark_jobs.runtime import sunion

MODULE = "spark_jobs/runtime/sunion.py"


def module_at(commit: str, directory: Path) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{commit}:{MODULE}"], check=True, capture_output=True, text=True
    ).stdout
    path = directory / f"sunion_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"sunion_{commit}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run(module: Any, width: float, mode: str, args: argparse.Namespace, spool: Path) -> tuple:
    setup = bucket_cost._setup(width, args, "ab")
    try:
        options = bucket_cost._reader_options(setup, mode, width, spool)
        reader = module.SUnionReader(options, CONNECTION_SCHEMA)
        plan = read = 0.0
        buckets = 0
        start: dict[str, int] | None = None
        while True:
            t0 = time.perf_counter()
            start = start or reader.initialOffset()
            end = reader.latestOffset(start)
            parts = reader.partitions(start, end)
            t1 = time.perf_counter()
            plan += t1 - t0
            if not parts:
                break
            for part in parts:
                for _ in reader.read(part):
                    pass
            read += time.perf_counter() - t1
            buckets += end["bucket"] - start["bucket"]
            start = end
        reader.stop()
    finally:
        setup.close()
    seconds = buckets * width
    return 1000 * plan / seconds, 1000 * read / seconds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="commit of the earlier reader")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", default="dpc", choices=["dpc", "plain"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    load = argparse.Namespace(rate=300, seconds=24, batch_seconds=4.0)
    found: dict[str, list[tuple[float, float]]] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="reader-ab-") as tmp:
        root = Path(tmp)
        readers = {"before": module_at(args.before, root), "now": sunion}
        for repeat in range(args.repeats):
            for width in bucket_cost.WIDTHS:
                for name, module in readers.items():
                    spool = root / f"spool-{name}-{width}-{repeat}"
                    found.setdefault(f"{name} {width}", []).append(
                        run(module, width, args.mode, load, spool)
                    )
    result: dict[str, Any] = {
        "before": args.before,
        "mode": args.mode,
        "load": [load_before, os.getloadavg()],
        "median_ms_per_input_second": {
            key: {
                "plan": round(statistics.median(p for p, _ in values), 1),
                "read": round(statistics.median(r for _, r in values), 1),
            }
            for key, values in found.items()
        },
    }
    for key, value in result["median_ms_per_input_second"].items():
        print(f"{key:>12} s buckets: plan {value['plan']} ms, read {value['read']} ms per s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
