"""Why do generated underloaded federations fail to reach an acceptable allocation?

python -m bench.whatif.diagnose [--participants 40] [--tasks 20] [--seeds 10] [--k 1 3 7]
    [--max-hops 2] [--no-task-cap]

``--max-hops 2`` restores the old 2-contract limit on chained moves and ``--no-task-cap`` the
old generator (tasks as large as the Dirichlet shares make them), to attribute a change.

Simulates the quality grid's federations and classifies every run that ends unacceptable by
what its offenders (participants left above their threshold) could still have done:

- ``past_capacity``: an offender is at or past capacity (M/M/1 cost infinite);
- ``fits_partner``: one of its movable tasks fits below the threshold of a direct partner
  (the direct offer should have found it: a mechanism fault);
- ``fits_within_2`` / ``fits_beyond_2``: it fits only at a participant 2 contracts away, or
  only further (the 2-hop relay limit);
- ``swap_only``: no task fits anywhere, but swapping it for a smaller task of a partner would
  leave both no worse (nothing moves one task at a time);
- ``fits_nowhere``: even the smallest task is larger than every participant's room below its
  threshold (the instance's granularity, not the mechanism).

Also reports the start state: participants whose single largest task exceeds every threshold
in the federation, and participants starting past capacity.
"""

from __future__ import annotations

import argparse
import collections
import math
from collections.abc import Sequence

from app.market import generate
from app.market.generate import generate_federation
from app.market.simulator import DEFAULT_MAX_HOPS, simulate

WIDTHS = [0.0, 0.05, 0.1, 0.15, 0.2]


def _neighbours(doc_contracts: Sequence[tuple[str, str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = collections.defaultdict(set)
    for a, b in doc_contracts:
        out[a].add(b)
        out[b].add(a)
    return out


def _distance(adj: dict[str, set[str]], start: str) -> dict[str, int]:
    dist = {start: 0}
    frontier = [start]
    while frontier:
        nxt = []
        for n in frontier:
            for m in adj[n]:
                if m not in dist:
                    dist[m] = dist[n] + 1
                    nxt.append(m)
        frontier = nxt
    return dist


def classify(
    participants: int,
    k: int,
    width: float,
    seed: int,
    tasks: int,
    max_steps: int,
    max_hops: int | None = DEFAULT_MAX_HOPS,
) -> tuple[bool, list[str], dict[str, int]]:
    doc = generate_federation(
        participants=participants,
        contracts_per_participant=k,
        price_range_width=width,
        load_skew=1.0,
        capacity_spread=0.5,
        seed=seed,
        tasks_per_participant=tasks,
        overload=0.7,
    )
    caps = {p.name: p.capacity for p in doc.participants}
    start: dict[str, int] = collections.Counter()
    start_load: dict[str, float] = collections.defaultdict(float)
    largest: dict[str, float] = collections.defaultdict(float)
    for t in doc.tasks:
        start_load[t.owner] += t.load
        largest[t.owner] = max(largest[t.owner], t.load)
    result = simulate(doc, max_steps=max_steps, max_hops=max_hops, record_trace=False)
    thr = result.thresholds
    start["past_capacity_at_start"] = sum(start_load[n] >= caps[n] for n in caps)
    start["task_above_every_threshold"] = sum(largest[n] > max(thr.values()) for n in caps)
    if result.acceptable:
        return True, [], start
    adj = _neighbours([(c.a, c.b) for c in doc.contracts])
    load = result.final_load
    room = {n: thr[n] - load[n] for n in thr}
    # Which tasks does each participant host at the end? Replay the move log.
    host = {t.name: t.owner for t in doc.tasks}
    size = {t.name: t.load for t in doc.tasks}
    for m in result.move_log:
        host[m.task] = m.target
    hosted: dict[str, list[float]] = collections.defaultdict(list)
    for name, h in host.items():
        hosted[h].append(size[name])
    labels = []
    for line in result.reasons:
        who = line.split(" ", 1)[0]
        if load[who] >= caps[who]:
            labels.append("past_capacity")
            continue
        dist = _distance(adj, who)
        smallest = min(hosted[who])
        fits = [n for n in thr if n != who and room[n] >= smallest]
        if any(dist.get(n) == 1 for n in fits):
            labels.append("fits_partner")
        elif any(dist.get(n) == 2 for n in fits):
            labels.append("fits_within_2")
        elif fits:
            labels.append("fits_beyond_2")
        elif any(
            min(hosted[n], default=0.0) < smallest
            and load[who] - smallest + min(hosted[n]) <= thr[who]
            for n in adj[who]
        ):
            labels.append("swap_only")
        else:
            labels.append("fits_nowhere")
    return False, labels, start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--participants", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=600)
    parser.add_argument("--k", type=int, nargs="*", default=list(range(1, 11)))
    parser.add_argument("--widths", type=float, nargs="*", default=WIDTHS)
    parser.add_argument("--max-hops", type=int, default=DEFAULT_MAX_HOPS)
    parser.add_argument("--no-task-cap", action="store_true")
    args = parser.parse_args(argv)
    if args.no_task_cap:
        generate.MAX_TASK_FRACTION = math.inf
    table: dict[float, list[float]] = {}
    for width in args.widths:
        for k in args.k:
            ok = 0
            why: collections.Counter[str] = collections.Counter()
            at_start: collections.Counter[str] = collections.Counter()
            for seed in range(args.seeds):
                good, labels, start = classify(
                    args.participants, k, width, seed, args.tasks, args.max_steps, args.max_hops
                )
                ok += good
                why.update(labels)
                at_start.update({key: int(v > 0) for key, v in start.items()})
            print(
                f"width {width:.2f} k {k:2d}: acceptable {ok}/{args.seeds}; offenders "
                f"{dict(why)}; runs with {dict(at_start)}",
                flush=True,
            )
            table.setdefault(width, []).append(ok / args.seeds)
    print("fraction acceptable, width \\ k " + " ".join(f"{k:5d}" for k in args.k))
    for width, row in table.items():
        print(f"{width:5.2f} " + " ".join(f"{f:5.2f}" for f in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
