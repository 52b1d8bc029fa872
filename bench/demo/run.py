"""Demo benchmark: how fast the live federation reaches an acceptable allocation, per act.

python -m bench.demo.run [--time-scale 0.55] [--json FILE]

Runs ``fedload demo`` (the service and one agent process per participant, the federation's real
Spark fragments moved with their state)
and, in the same run, the pure simulator on the same federation file. For each act of the
Borealis timeline (start; B's load x4; D joins) it reports the seconds from the act's start (A
crossing its threshold, the overload, the join) to the first acceptable allocation, live and
simulated, and their ratio: the simulator is the baseline of the same decisions without HTTP,
Spark or measured loads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from app.federation.document import load_federation
from app.market.simulator import simulate
from spark_jobs.scenarios.demo import DemoOptions, run_demo, scaled

FEDERATION = Path("contracts/borealis-demo.yaml")


def act_starts(doc_timeline: list[float]) -> list[float]:
    return [0.0, *sorted(doc_timeline)]


def first_acceptable(series: list[tuple[float, bool]], start: float, end: float) -> float | None:
    for t, ok in series:
        if start <= t < end and ok:
            return t - start
    return None


def live_series(report: dict[str, Any]) -> list[tuple[float, bool]]:
    """The demo's own verdict at every step (the same rule as the simulator's)."""
    return [(float(r["at"]), bool(r["acceptable"])) for r in report["acceptable"]]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=DemoOptions.time_scale)
    parser.add_argument("--json", type=Path, default=Path("bench/demo/results.json"))
    args = parser.parse_args(argv)

    doc = scaled(load_federation(FEDERATION), args.time_scale)
    started = time.perf_counter()
    sim = simulate(doc)
    sim_seconds = time.perf_counter() - started
    sim_series = [(float(r.t), bool(r.acceptable)) for r in sim.trace]

    report_dir = Path("bench/out/demo")
    started = time.perf_counter()
    run_demo(
        DemoOptions(
            federation=FEDERATION,
            report_dir=report_dir,
            time_scale=args.time_scale,
            ui=False,
        ),
        Console(quiet=True),
    )
    live_seconds = time.perf_counter() - started
    report = json.loads((report_dir / "report.json").read_text())
    series = live_series(report)

    starts = act_starts([e.at for e in doc.timeline])
    ends = [*starts[1:], float("inf")]
    names = ["A over its threshold", "B's load x4 (overload)", "D joins"]
    acts = []
    for name, start, end in zip(names, starts, ends, strict=False):
        live = first_acceptable(series, start, end)
        simulated = first_acceptable(sim_series, start, end)
        ratio = live / simulated if live is not None and simulated else None
        acts.append(
            {"act": name, "start": start, "live_s": live, "simulated_s": simulated, "ratio": ratio}
        )
        print(f"{name:>26}: live {live} s, simulated {simulated} s, ratio {ratio}")
    result = {
        "federation": str(FEDERATION),
        "time_scale": args.time_scale,
        "real_fragments": report["real_fragments"],
        "acts": acts,
        "checks": report["checks"],
        "moves_live": len(report["moves"]),
        "moves_simulated": sim.moves,
        "wall_seconds": {"live": round(live_seconds, 1), "simulator": round(sim_seconds, 4)},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["checks"]), f"moves live {result['moves_live']}, sim {sim.moves}")
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
