"""The what-if simulation two ways: participant nodes over the memory registry against the
per-task simulator, on the Borealis demo and a few generated federations.

python -m bench.whatif.nodes_vs_simulator [--seeds 3] [--repeats 3] [--json FILE]

For each federation both paths run (``app.market.simulator.simulate`` and
``app.participant.simulation.simulate_nodes``); reported per federation: the verdict at the end
of each act (and the seconds from the act's start to an acceptable allocation that lasts), the
number of moves, the payments, and the wall time of each path (median of ``--repeats`` runs)
with the ratio nodes / simulator. The issue keeps the old simulator until verdicts, moves and
sweep speed match: this is that measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.federation.document import FederationDoc, TimelineEvent, load_federation
from app.market.generate import generate_federation
from app.market.simulator import SimulationResult, simulate
from app.participant.simulation import acts, simulate_nodes

ROOT = Path(__file__).resolve().parents[2]


def federations(seeds: int) -> list[tuple[str, FederationDoc]]:
    out = [("borealis-demo", load_federation(ROOT / "contracts" / "borealis-demo.yaml"))]
    for n, k, width in ((8, 2, 0.1), (20, 3, 0.1), (40, 4, 0.05)):
        for seed in range(1, seeds + 1):
            doc = generate_federation(
                participants=n,
                contracts_per_participant=k,
                price_range_width=width,
                load_skew=1.0,
                capacity_spread=0.5,
                seed=seed,
                tasks_per_participant=10,
                overload=0.7,
                duration_seconds=1200,
            )
            out.append((f"gen n={n} k={k} w={width} seed={seed}", doc))
    # One with a second act: the most loaded participant's input rate doubles at 600 s.
    base = out[1][1]
    heavy = max(
        base.participants, key=lambda p: sum(t.load for t in base.tasks if t.owner == p.name)
    )
    surge = TimelineEvent(at=600, event="scale_load", participant=heavy.name, factor=2.0)
    out.append((f"{out[1][0]} +surge", dataclasses.replace(base, timeline=(surge,))))
    return out


def timed(
    run: Callable[[FederationDoc], SimulationResult], doc: FederationDoc, repeats: int
) -> tuple[SimulationResult, float]:
    seconds: list[float] = []
    result: SimulationResult | None = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run(doc)
        seconds.append(time.perf_counter() - start)
    assert result is not None
    return result, statistics.median(seconds)


def describe(doc: FederationDoc, result: SimulationResult, seconds: float) -> dict[str, Any]:
    return {
        "acceptable": result.acceptable,
        "acts": [
            {"start": a.start, "acceptable": a.acceptable, "to_acceptable": a.seconds_to_acceptable}
            for a in acts(doc, result)
        ],
        "moves": result.moves,
        "offers": result.offers,
        "payments": round(result.payments_total, 2),
        "cost": round(result.cost, 3),
        "steps": result.steps,
        "seconds": round(seconds, 4),
        "why_not": list(result.reasons),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(
        f"{'federation':34} {'verdicts sim/nodes':22} {'to acceptable per act, s':26} "
        f"{'moves':>9} {'payments':>19} {'wall s sim/nodes':>17} {'ratio':>6}"
    )
    for name, doc in federations(args.seeds):
        sim, t_sim = timed(simulate, doc, args.repeats)
        nodes, t_nodes = timed(simulate_nodes, doc, args.repeats)
        a, b = describe(doc, sim, t_sim), describe(doc, nodes, t_nodes)
        verdicts = [x["acceptable"] for x in a["acts"]], [x["acceptable"] for x in b["acts"]]
        row: dict[str, Any] = {
            "federation": name,
            "simulator": a,
            "nodes": b,
            "verdicts_agree": verdicts[0] == verdicts[1],
            "ratio": round(t_nodes / t_sim, 1),
        }
        rows.append(row)

        def flags(v: list[bool]) -> str:
            return "".join("y" if x else "n" for x in v)

        def times(x: dict[str, Any]) -> str:
            return ",".join(
                "-" if a["to_acceptable"] is None else f"{a['to_acceptable']:g}" for a in x["acts"]
            )

        print(
            f"{name:34} {flags(verdicts[0]) + '/' + flags(verdicts[1]):22} "
            f"{times(a) + ' / ' + times(b):26} {a['moves']:>4}/{b['moves']:<4} "
            f"{a['payments']:>9.0f}/{b['payments']:<9.0f} "
            f"{t_sim:>8.3f}/{t_nodes:<8.3f} {row['ratio']:>6}"
        )
    agree = sum(r["verdicts_agree"] for r in rows)
    ratios: list[float] = [r["ratio"] for r in rows]
    print(
        f"verdicts agree in every act: {agree}/{len(rows)}; wall-time ratio nodes/simulator: "
        f"median {statistics.median(ratios):.1f}, range {min(ratios)}..{max(ratios)}"
    )
    if args.json:
        load = os.getloadavg()
        args.json.write_text(
            json.dumps(
                {
                    "command": "python -m bench.whatif.nodes_vs_simulator "
                    + f"--seeds {args.seeds} --repeats {args.repeats}",
                    "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "machine": {
                        "nproc": os.cpu_count(),
                        "loadavg": load,
                        "python": platform.python_version(),
                    },
                    "rows": rows,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
