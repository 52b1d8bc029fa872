"""Two ways of running the tentative scenario at the paper's settings, back to back per failure
length, compared as a ratio (these machines are shared and noisy: only the same run compares).

Each arm is a label and the keyword arguments ``bench.ha.agents_failures.one_run`` takes for it
(the agents' Spark settings, how the copies reconcile). The table gives per copy the maximum
added latency, the first version's (either copy's: what a consumer reading the copy ahead sees)
and the redo's time, with the second arm's over the first's.
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

Arms = dict[str, dict[str, Any]]


def max_added_ms(run: dict[str, Any]) -> dict[str, float | None]:
    """Per copy its maximum added latency, and the first version's, in ms (None: no figure)."""
    if "error" in run:
        return {}
    out: dict[str, float | None] = {
        holder: copy["max_added_latency_ms"] for holder, copy in run["copies"].items()
    }
    out["first version"] = (run.get("first_version") or {}).get("max_added_latency_ms")
    return out


def redo_ms(run: dict[str, Any]) -> dict[str, float | None]:
    if "error" in run:
        return {}
    return {holder: copy["redo_ms"] for holder, copy in run["copies"].items()}


def ratio(second: float | None, first: float | None) -> str:
    if second is None or first is None or first <= 0:
        return "-"
    return f"{second / first:.2f}"


def table(pairs: list[dict[str, Any]], arms: list[str], title: str, console: Console) -> None:
    first, second = arms
    out = Table(title=title)
    for column in ("failure", "what", f"{first} s", f"{second} s", f"{second} / {first}"):
        out.add_column(column)
    for pair in pairs:
        for label, pick in (("max added", max_added_ms), ("redo", redo_ms)):
            a, b = pick(pair[first]), pick(pair[second])
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
        for arm in arms:
            run = pair[arm]
            if "error" in run:
                console.print(f"{pair['fail_for_s']:g} s, {arm}: failed: {run['error']}")
            elif not run["ok"]:
                failed = ", ".join(name for name, passed in run["checks"].items() if not passed)
                console.print(f"{pair['fail_for_s']:g} s, {arm}: checks failed: {failed}")


def main(doc: str, arms: Arms, default_json: Path, title: str) -> None:
    """The command line every same-run bench shares (``--failures``, ``--rate``, ``--json``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--failures", type=float, nargs="+", default=[4.0, 8.0])
    parser.add_argument("--rate", type=int, default=300, help="rows per second of each source")
    parser.add_argument("--json", type=Path, default=default_json)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--reconcile-timeout", type=float, default=420.0)
    args = parser.parse_args()
    # The Borealis harness's settings: 3 streams, 100 ms boundaries, X = 3 s.
    args.streams, args.bucket_seconds, args.max_delay = 3, 0.1, 3.0
    console = Console(width=None if os.isatty(1) else 140)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fedload-same-run-"))
    code = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    pairs: list[dict[str, Any]] = []
    for fail_for_s in args.failures:
        pair: dict[str, Any] = {"fail_for_s": fail_for_s}
        for arm, kwargs in arms.items():
            console.rule(f"{fail_for_s:g} s failure, {arm}")
            run = one_run(fail_for_s, args.rate, 0, args, work, console, **kwargs)
            pair[arm] = run | {"code": code}
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
    table(pairs, list(arms), title, console)
    console.print(f"wrote {args.json}")
