"""Failures of several lengths through the product: the tentative scenario per failure length.

Issue 13 asks, at the Borealis experiment's settings with agents as processes, per failure
length: the maximum added latency (within X whenever input is available, also while the copies
reconcile), no tentative tuple for a failure shorter than the delay budget, the tentative tuples
otherwise, and the reconciliation time. Each length is one run of
``spark_jobs.scenarios.tentative`` (``fedload serve`` and the agents of O, T and U, each with its
own Spark; every link into O cut for the failure's length; T's and U's active copies of O.x, X =
5 s, go tentative once their budget has passed and reconcile one at a time under the registry's
permit after the heal). A run that brings no tentative output ends once both copies have
processed stably past the heal plus X (``TentativeOptions.settle_without_tentative``).

Per copy (T, U): tentative rows it sent, the paper's added latency at the copy against X, the
time from the cut to UP_FAILURE, and its reconciliation (heal -> permit granted, redo from the
grant to the UNDO, grant -> STABLE again), corrections, whether its corrected log equals O's.

    PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
      flock /tmp/fedload-heavy.lock .venv/bin/python -m bench.ha.agents_failures \\
      [--failures 2 8 15] [--rates 30 1000] [--json FILE] [--append] [--workdir DIR]

The Borealis harness's settings (three input streams, boundaries every 100 ms, X = 3 s) are
``--streams 3 --bucket-seconds 0.1 --max-delay 3``; ``--repeat N`` runs each point N times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.participant.command import RECONCILE_MODES
from spark_jobs.scenarios.tentative import (
    HOLDERS,
    LATENCY_SLACK_S,
    TentativeOptions,
    run_tentative,
)

DEFAULT_JSON = Path(__file__).with_name("agents_failures.json")
# The tentative federation's generators (spark_jobs/scenarios/tentative-federation.yaml).
DEFAULT_RATE = 30


def _after(value: int | None, origin: int) -> int | None:
    return None if value is None else value - origin


def summarize_copy(report: dict[str, Any], holder: str) -> dict[str, Any]:
    """One copy's figures from a tentative report: times in ms, from the cut (UP_FAILURE) or
    from the heal (permit and reconciliation), as the report's ms since the consumer started."""
    copy = report["copies"][holder]
    failure_at, heal_at = int(report["failure_at_ms"]), int(report["heal_at_ms"])
    went = [int(at) for name, at in copy["history"] if name == "UP_FAILURE" and at >= failure_at]
    # The first reconciliation that began after the heal and came back STABLE.
    done = [
        r
        for r in copy["reconciliations"]
        if r["began"] is not None and r["began"] >= heal_at and r["stable"] is not None
    ]
    first = done[0] if done else None
    intervals = report["permit_intervals"] if isinstance(report["permit_intervals"], list) else []
    mine = [i for i in intervals if i["replica"] == holder and i["granted_ms"] >= heal_at]
    added = copy["max_added_latency_ms"]
    slack_ms = int(report.get("latency_slack_ms", LATENCY_SLACK_S * 1000))
    limit_ms = int(report["max_delay_ms"]) + slack_ms
    return {
        "went_tentative": bool(went),
        "cut_to_up_failure_ms": _after(went[0], failure_at) if went else None,
        "tentative_rows": int(copy["tentative_rows"]),
        "tentative_buckets": int(copy["tentative_buckets"]),
        "baseline_latency_ms": copy["baseline_latency_ms"],
        "max_added_latency_ms": added,
        "within_x": added is not None and added <= limit_ms,
        "permit_granted_after_heal_ms": _after(mine[0]["granted_ms"], heal_at) if mine else None,
        "permit_released_after_heal_ms": _after(mine[0]["released_ms"], heal_at) if mine else None,
        "redo_began_after_heal_ms": None if first is None else first["began"] - heal_at,
        # The redo from its start (the permit just granted) to the switch (UNDO sent).
        "redo_ms": None
        if first is None or first["switched"] is None
        else first["switched"] - first["began"],
        # Permit granted (redo started) -> STABLE again.
        "reconciliation_ms": None if first is None else first["stable"] - first["began"],
        "stable_after_heal_ms": None if first is None else first["stable"] - heal_at,
        # The state that reconciliation restored and redid from (reports before s25: None).
        "checkpoint_bytes": None if first is None else first.get("checkpoint_bytes"),
        "state_rows": None if first is None else first.get("state_rows"),
        "undos": int(copy["undos"]),
        "corrections": int(copy["corrections"]),
        "rec_dones": int(copy["rec_dones"]),
        "final_state": copy["final_state"],
        "log_equals_owners": bool(copy["log_equals_owners"]),
        "log_rows_compared": int(copy["log_rows_compared"]),
        "permits_lost": copy["permits_lost"],
        "redo_failures": copy["redo_failures"],
        # Reports before s29: None.
        "redo_recuts": copy.get("redo_recuts"),
        # Reports before s26: None.
        "redo_paused_s": copy.get("redo_paused_s"),
        "budget_ms": copy.get("budget_ms"),
        "min_budget_ms": copy.get("min_budget_ms"),
    }


def summarize(report: dict[str, Any], fail_for_s: float) -> dict[str, Any]:
    """A run's figures: per copy, and what the consumer saw."""
    consumer = report["consumer"]
    return {
        "fail_for_s": fail_for_s,
        "failure_at_ms": report["failure_at_ms"],
        "heal_at_ms": report["heal_at_ms"],
        "max_delay_ms": report["max_delay_ms"],
        "budget_t": report["budget"],
        "copies": {holder: summarize_copy(report, holder) for holder in HOLDERS},
        # Each bucket's first version from either copy (reports before s29: None).
        "first_version": report.get("first_version"),
        "consumer": {
            "tentative_received": consumer["tentative_received"],
            "held_at_end": consumer["held_at_end"],
            "switches": [(s["from"], s["to"], s["at_ms"]) for s in report["switches"]],
            "latency": report["consumer_latency"],
            "difference": report["difference"],
            "rows_compared": report["rows_compared"],
        },
        "reconciliations_overlap": report["reconciliations_overlap"],
        "checks": report["checks"],
        "ok": report["ok"],
    }


def one_run(
    fail_for_s: float,
    rate: int,
    repeat: int,
    args: argparse.Namespace,
    work: Path,
    console: Console,
    spark_conf: tuple[tuple[str, str], ...] = (),
    reconcile: str = "alongside",
) -> dict[str, Any]:
    """``spark_conf``: extra Spark settings of every agent (bench/ha/scheduler_pools.py);
    ``reconcile``: how the copies reconcile (``fedload agent --reconcile``,
    bench/ha/reconcile_modes.py)."""
    label = "".join(f"-{v}" for _, v in spark_conf) + ("" if reconcile == "alongside" else "-alone")
    base = work / f"rate-{rate}-fail-{fail_for_s:g}s-{repeat}{label}"
    options = TentativeOptions(
        report_dir=base / "report",
        work=base / "work",
        fail_for_s=fail_for_s,
        reconcile_timeout_s=args.reconcile_timeout,
        settle_without_tentative=True,
        source_rate=rate,
        streams=args.streams,
        bucket_seconds=args.bucket_seconds,
        max_delay_s=args.max_delay,
        agent_spark_conf=spark_conf,
        reconcile=reconcile,
    )
    began, load_before = time.time(), os.getloadavg()
    result: dict[str, Any] = {
        "fail_for_s": fail_for_s,
        "rows_per_second_per_source": rate,
        "settings": settings_of(args) | {"reconcile": reconcile},
        "repeat": repeat,
        "started_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "reconcile": reconcile,
    }
    try:
        report = run_tentative(options, console)
        result |= summarize(report, fail_for_s)
        result["report_dir"] = str(options.report_dir)
    except Exception as error:  # one failed run is a finding; the next length still runs
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-4000:]
        console.print(f"[red]{fail_for_s:g} s: {result['error']}[/red]")
    result["wall_seconds"] = round(time.time() - began, 1)
    result["load_before"] = [round(v, 2) for v in load_before]
    result["load_after"] = [round(v, 2) for v in os.getloadavg()]
    return result


# Runs from before these were knobs ran at the federation file's settings.
FILE_SETTINGS = {"streams": 2, "bucket_seconds": 1.0, "max_delay_s": 5.0}


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "streams": args.streams,
        "bucket_seconds": args.bucket_seconds,
        "max_delay_s": FILE_SETTINGS["max_delay_s"] if args.max_delay is None else args.max_delay,
    }


RunKey = tuple[int, float, float, str, int, int, float]


def _run_key(run: dict[str, Any]) -> RunKey:
    # Runs from before the rate was a knob ran at the federation file's rate.
    settings = run.get("settings", FILE_SETTINGS)
    return (
        int(settings["streams"]),
        float(settings["bucket_seconds"]),
        float(settings["max_delay_s"]),
        # Runs from before ``--reconcile`` reconciled alongside.
        str(settings.get("reconcile", "alongside")),
        int(run.get("rows_per_second_per_source", DEFAULT_RATE)),
        int(run.get("repeat", 0)),
        float(run["fail_for_s"]),
    )


def _s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f}"


def table(runs: list[dict[str, Any]], console: Console) -> None:
    out = Table(title="Failures through the product (tentative scenario)")
    columns = (
        "streams x bucket, X",
        "rows/s",
        "failure",
        "copy",
        "cut->UP_FAILURE s",
        "tentative rows",
        "max added s",
        "first version s",
        "heal->permit s",
        "redo s",
        "permit->STABLE s",
        "state rows",
        "corrections",
        "log = O's",
        "load before/after",
        "wall s",
        "ok",
    )
    for column in columns:
        out.add_column(column, justify="left" if column in ("failure", "copy") else "right")
    for run in sorted(runs, key=_run_key):
        load = f"{run['load_before'][0]:.1f} / {run['load_after'][0]:.1f}"
        streams, bucket_s, x_s, reconcile, rate_value, _, _ = _run_key(run)
        setting = f"{streams} x {bucket_s:g} s, {x_s:g} s" + (
            f", {reconcile}" if reconcile != "alongside" else ""
        )
        rate = str(rate_value)
        if "error" in run:
            out.add_row(
                setting,
                rate,
                f"{run['fail_for_s']:g} s",
                "-",
                run["error"][:60],
                *[""] * 9,
                load,
                f"{run['wall_seconds']:.0f}",
                "no",
            )
            continue
        first = run.get("first_version") or {}
        for holder, c in run["copies"].items():
            out.add_row(
                setting,
                rate,
                f"{run['fail_for_s']:g} s",
                holder,
                _s(c["cut_to_up_failure_ms"]),
                str(c["tentative_rows"]),
                _s(c["max_added_latency_ms"]),
                _s(first.get("max_added_latency_ms")),
                _s(c["permit_granted_after_heal_ms"]),
                _s(c["redo_ms"]),
                _s(c["reconciliation_ms"]),
                "-" if c.get("state_rows") is None else str(c["state_rows"]),
                str(c["corrections"]),
                "yes" if c["log_equals_owners"] else "no",
                load,
                f"{run['wall_seconds']:.0f}",
                "yes" if run["ok"] else "no",
            )
    console.print(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--failures", type=float, nargs="+", default=[2.0, 8.0, 15.0], help="seconds cut, per run"
    )
    parser.add_argument(
        "--rates",
        type=int,
        nargs="+",
        default=[DEFAULT_RATE],
        help="rows per second of each of the two sources, per run (the paper's: 1000-1500)",
    )
    parser.add_argument(
        "--streams", type=int, choices=(2, 3), default=2, help="input streams of O.x (paper: 3)"
    )
    parser.add_argument(
        "--bucket-seconds",
        type=float,
        default=1.0,
        help="boundary interval of every stream (paper: 0.1)",
    )
    parser.add_argument(
        "--max-delay", type=float, default=None, help="X, seconds (paper: 3; default the file's 5)"
    )
    parser.add_argument(
        "--reconcile",
        choices=RECONCILE_MODES,
        default="alongside",
        help="how the copies reconcile (fedload agent --reconcile; Borealis: alone)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per point")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument(
        "--append", action="store_true", help="keep the file's runs of other failure lengths"
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--reconcile-timeout", type=float, default=420.0, help="seconds for both copies"
    )
    args = parser.parse_args()
    # Wide when written to a log: the table has thirteen columns.
    console = Console(width=None if sys.stdout.isatty() else 180)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fedload-failures-"))
    work.mkdir(parents=True, exist_ok=True)
    code = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    kept: list[dict[str, Any]] = []
    if args.append and args.json.exists():
        kept = json.loads(args.json.read_text()).get("runs", [])
    settings = settings_of(args)
    points = sorted(
        (rate, repeat, fail_for_s)
        for rate in args.rates
        for fail_for_s in args.failures
        for repeat in range(args.repeat)
    )
    wanted = {
        (
            settings["streams"],
            settings["bucket_seconds"],
            settings["max_delay_s"],
            args.reconcile,
            rate,
            repeat,
            fail_for_s,
        )
        for rate, repeat, fail_for_s in points
    }
    runs = [r for r in kept if _run_key(r) not in wanted]
    for rate, repeat, fail_for_s in points:
        run = one_run(fail_for_s, rate, repeat, args, work, console, reconcile=args.reconcile) | {
            "code": code
        }
        runs.append(run)
        # Written after each run: a later one that hangs or is stopped loses nothing before it.
        result = {
            "runs": sorted(runs, key=_run_key),
            "machine": {"machine": platform.machine(), "nproc": os.cpu_count()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str))
    table(runs, console)
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
