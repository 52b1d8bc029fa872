"""Seconds per round and peak driver memory of ``fedload whatif --large N``, as users run it.

PYTHONPATH=. .venv/bin/python -m bench.whatif.large_rounds [--sizes 10000 30000 100000] [--k 10]
    [--max-rounds 200] [--out var/bench/large] [--code CHECKOUT] [-- EXTRA fedload whatif OPTIONS]

Each size runs the real command in a child process with the defaults (no --spark-conf), while
this process samples the resident memory of the command's process tree from /proc every 0.2 s
(the JVM: the Spark driver, in local mode its executors too; and the Python processes
separately) and the driver JVM's heap with ``jstat -gc`` every 0.5 s: heap used (eden,
survivors and old generation; garbage not yet collected included) and the part outside eden
(survivors and old generation: what outlived a collection, the retained set's upper bound).
Resident memory follows the heap the JVM was allowed more than what it needs; the heap used is
the driver's footprint. Seconds per round come from the run's summary.json. ``--code``: run the
command on another checkout's code (PYTHONPATH), for a before/after pair in one run. Prints one
Markdown row per size, with the load average before and after (the machine is shared): the
figures for ``bench/whatif/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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


class HeapSampler:
    """``jstat -gc PID 500`` on the command's JVM once it appears (one attached process, not a
    JVM start per sample): peak heap used and peak used outside eden, in bytes."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak_used = 0
        self.peak_outside_eden = 0
        self.samples = 0
        self._jstat: subprocess.Popen[str] | None = None

    def poll(self) -> None:
        """Called from the RSS sampler's loop: attach once the driver's JVM is there, and again
        whenever jstat ended (a JVM just started has no performance data yet)."""
        if self._jstat is not None and self._jstat.poll() is not None:
            self._jstat = None
        if self._jstat is not None or shutil.which("jstat") is None:
            return
        jvm = _jvm_of(self.root)
        if jvm is None:
            return
        self._jstat = subprocess.Popen(
            ["jstat", "-gc", str(jvm), "500"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._jstat is not None and self._jstat.stdout is not None
        header: list[str] = []
        for line in self._jstat.stdout:
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "S0C":
                header = fields
                continue
            try:
                kib = dict(zip(header, (float(f) for f in fields), strict=True))
            except ValueError:
                continue
            outside = kib["S0U"] + kib["S1U"] + kib["OU"]
            self.peak_used = max(self.peak_used, int((outside + kib["EU"]) * 1024))
            self.peak_outside_eden = max(self.peak_outside_eden, int(outside * 1024))
            self.samples += 1

    def stop(self) -> None:
        if self._jstat is not None:
            self._jstat.terminate()
            self._jstat.wait(timeout=10)


def _jvm_of(root: int) -> int | None:
    """The Spark driver's JVM (``spark-submit`` first runs a short-lived launcher JVM)."""
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"org.apache.spark.deploy.SparkSubmit" in handle.read():
                    return pid
        except OSError:
            continue
    return None


def run(
    size: int,
    k: int,
    max_rounds: int,
    out: Path,
    extra: list[str],
    code: Path | None = None,
) -> dict[str, object]:
    target = out.resolve() / f"n{size}"
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
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code.resolve())
    # Spark's Python workers import from their working directory first: run the command in
    # the checkout whose code is measured.
    child = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=code.resolve() if code is not None else None,
    )
    peak = {"jvm": 0, "python": 0, "total": 0}
    done = threading.Event()
    heap = HeapSampler(child.pid)

    def sample() -> None:
        while not done.is_set():
            heap.poll()
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
    heap.stop()
    wall = time.perf_counter() - began
    row: dict[str, object] = {
        "participants": size,
        "k": k,
        "exit": child.returncode,
        "wall_seconds": wall,
        "peak_jvm_mib": peak["jvm"] / 2**20,
        "peak_python_mib": peak["python"] / 2**20,
        "peak_total_mib": peak["total"] / 2**20,
        "peak_heap_used_mib": heap.peak_used / 2**20,
        "peak_heap_outside_eden_mib": heap.peak_outside_eden / 2**20,
        "heap_samples": heap.samples,
        "code": str(code) if code is not None else "this checkout",
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
    parser.add_argument("--code", type=Path, default=None, help="run another checkout's code")
    parser.add_argument("extra", nargs="*", help="more fedload whatif options, after --")
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        rows.append(run(size, args.k, args.max_rounds, args.out, args.extra, args.code))
        # Written after every size: the largest can take long on a shared machine.
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=1))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "seconds_per_round"}))
    print(
        "| participants | exit | rounds | s/round median (first, last) | wall s | peak JVM RSS MiB "
        "| peak heap used MiB (outside eden) | peak Python MiB | load avg before -> after |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        rounds = (
            f"{r['median_round']:.2f} ({r['first_round']:.2f}, {r['last_round']:.2f})"
            if r.get("median_round") is not None
            else "-"
        )
        print(
            f"| {r['participants']:,} | {r['exit']} | {r.get('rounds', '-')} | {rounds} "
            f"| {r['wall_seconds']:.0f} | {r['peak_jvm_mib']:.0f} "
            f"| {r['peak_heap_used_mib']:.0f} ({r['peak_heap_outside_eden_mib']:.0f}) "
            f"| {r['peak_python_mib']:.0f} "
            f"| {r['load_before']:.1f} -> {r['load_after']:.1f} |"
        )
        if "error" in r:
            print(f"  error: {str(r['error']).strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
