"""The large what-if on a standalone Spark cluster with two workers against ``local[2]``, same run.

PYTHONPATH=. .venv/bin/python -m bench.whatif.cluster_vs_local [--sizes 10000 30000] [--k 10]
    [--repeats 1] [--out var/bench/cluster]

Starts a master and two workers from the pyspark package (``tests/support/spark_cluster.py``:
one core and 2 GB each, so the cluster has the same two cores as ``local[2]``), then runs
``fedload whatif --large N`` alternately with ``--spark-master local[2]`` and with the cluster's
URL (``bench.whatif.large_rounds.run``: seconds per round from the summary, peak memory of the
command's process tree). The cluster's executors are separate JVMs outside that tree, so their
memory is not in the peak; what the pair shows is the cost of the cluster path itself (task
shipping, executors over the network, code shipped as a zip) on the same machine and load.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.whatif.large_rounds import run


def _row(label: str, r: dict[str, Any]) -> str:
    if r.get("median_round") is None:
        failed = f"exit {r['exit']}"
        return f"| {r['participants']:,} | {label} | {failed} | - | {r['wall_seconds']:.0f} | - |"
    seconds = ", ".join(f"{s:.1f}" for s in r["seconds_per_round"])
    return (
        f"| {r['participants']:,} | {label} | {r['rounds']} | {seconds} | {r['wall_seconds']:.0f} "
        f"| {r['load_before']:.1f} -> {r['load_after']:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("var/bench/cluster"))
    args = parser.parse_args()

    from tests.support.spark_cluster import standalone_cluster

    rows: list[tuple[str, dict[str, Any]]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as work,
        standalone_cluster("bench", Path(work), workers=2, cores=1, memory="2g") as cluster,
    ):
        for size in args.sizes:
            for repeat in range(args.repeats):
                for label, master in (("local[2]", "local[2]"), ("cluster 2x1", cluster.url)):
                    out = args.out / f"{label.split()[0].replace('[2]', '')}-{repeat}"
                    row = run(size, args.k, args.max_rounds, out, ["--spark-master", master])
                    row["master"] = label
                    rows.append((label, row))
                    (args.out / "results.json").write_text(
                        json.dumps([r for _, r in rows], indent=1)
                    )
                    print(json.dumps({k: v for k, v in row.items() if k != "error"}), flush=True)
                    if "error" in row:
                        print(str(row["error"])[-1500:], flush=True)
    print("| participants | master | rounds | seconds per round | wall s | load avg |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, r in rows:
        print(_row(label, r))


if __name__ == "__main__":
    main()
