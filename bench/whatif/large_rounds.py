"""Seconds per round and peak driver memory of ``fedload whatif --large N``, as users run it.

PYTHONPATH=. .venv/bin/python -m bench.whatif.large_rounds [--sizes 10000 30000 100000] [--k 10]
    [--max-rounds 200] [--out var/bench/large] [-- EXTRA fedload whatif OPTIONS...]

Each size runs the real command in a child process with the defaults (no --spark-conf: the
session sizes its own driver heap), while this process samples the resident memory of the
command's process tree from /proc every 0.2 s: the JVM (the Spark driver; in local mode its
executors too) and the Python processes separately. Seconds per round come from the run's
summary.json. Prints one Markdown row per size, with the load average before and after
(the machine is shared): the figures for ``bench/whatif/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _rss_by_kind(root: int) -> dict[str, int]:
    sizes = {"jvm": 0, "python": 0}
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/statm") as handle:
                rss = int(handle.read().split()[1]) * PAGE
            with open(f"/proc/{pid}/comm") as handle:
                name = handle.read().strip()
        except OSError:
            continue
        sizes["jvm" if name == "java" else "python"] += rss
    return sizes


def run(size: int, k: int, max_rounds: int, out: Path, extra: list[str]) -> dict[str, object]:
    target = out / f"n{size}"
    command = [
        str(Path(sys.executable).parent / "fedload"),
        "whatif",
        "--large",
        str(size),
        "--k",
        str(k),
        "--max-rounds",
        str(max_rounds),
        "--out",
        str(target),
        *extra,
    ]
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = {"jvm": 0, "python": 0, "total": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sizes = _rss_by_kind(child.pid)
            for kind, value in sizes.items():
                peak[kind] = max(peak[kind], value)
            peak["total"] = max(peak["total"], sum(sizes.values()))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = child.communicate()
    done.set()
    sampler.join()
    wall = time.perf_counter() - began
    row: dict[str, object] = {
        "participants": size,
        "k": k,
        "exit": child.returncode,
        "wall_seconds": wall,
        "peak_jvm_mib": peak["jvm"] / 2**20,
        "peak_python_mib": peak["python"] / 2**20,
        "peak_total_mib": peak["total"] / 2**20,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    if child.returncode != 0:
        row["error"] = stderr.decode(errors="replace")[-2000:]
        return row
    summary = json.loads((target / "summary.json").read_text())
    seconds = [float(s) for s in summary["seconds_per_round"]]
    row.update(
        rounds=summary["rounds"],
        acceptable=summary["acceptable"],
        steps_to_acceptable=summary["steps_to_acceptable"],
        seconds_per_round=seconds,
        median_round=statistics.median(seconds) if seconds else None,
        first_round=seconds[0] if seconds else None,
        last_round=seconds[-1] if seconds else None,
        cost_ratio=summary.get("cost_ratio"),
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--max-rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("var/bench/large"))
    parser.add_argument("extra", nargs="*", help="more fedload whatif options, after --")
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        rows.append(run(size, args.k, args.max_rounds, args.out, args.extra))
        # Written after every size: the largest can take long on a shared machine.
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=1))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "seconds_per_round"}))
    print(
        "| participants | exit | rounds | s/round median (first, last) | wall s "
        "| peak JVM MiB | peak Python MiB | load avg before -> after |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        rounds = (
            f"{r['median_round']:.2f} ({r['first_round']:.2f}, {r['last_round']:.2f})"
            if r.get("median_round") is not None
            else "-"
        )
        print(
            f"| {r['participants']:,} | {r['exit']} | {r.get('rounds', '-')} | {rounds} "
            f"| {r['wall_seconds']:.0f} | {r['peak_jvm_mib']:.0f} | {r['peak_python_mib']:.0f} "
            f"| {r['load_before']:.1f} -> {r['load_after']:.1f} |"
        )
        if "error" in r:
            print(f"  error: {str(r['error']).strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
