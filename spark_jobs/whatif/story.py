"""What happened in one simulated federation, act by act, in sentences a planner reads.

An act runs from one timeline event (or a participant joining) to the next. Each act says what
the event did, who was over its threshold, which load went where (moves aggregated per route and
reason), and how the act ended under the one acceptability rule. For the Borealis demo federation
the story is checked against the one ``make demo`` tells (README, "The demo and its story"), and
every claim that does not hold says what the simulation did instead. Pure: a federation document
and a ``SimulationResult`` in, sentences out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.federation.document import FederationDoc, TimelineEvent
from app.market.simulator import MoveRecord, SimulationResult, StepRecord

DEMO_FEDERATION = "borealis-demo"
# Why even a matching story has other times and counts than ``make demo``.
DEMO_DIFFERENCES = (
    "The what-if moves declared loads on a simulated clock (1 s steps, an offer round every 7 s, "
    "a move done within its round); make demo runs agent processes that measure load from "
    "Spark's progress (judged with a 1% tolerance), move fragments with their checkpoints over "
    "Arrow Flight (seconds per move) and scale the file's times by --time-scale (0.55): the "
    "same acts and verdicts, at other times and with other move counts."
)


@dataclass(frozen=True)
class Flow:
    """Tasks that travelled one route for one reason within an act."""

    route: tuple[str, ...]  # giver, relays..., taker
    reason: str  # offer | relay | move_back | leave
    tasks: int
    load: float
    prices: tuple[float, ...]

    def sentence(self) -> str:
        what = f"{self.tasks} task{'s' if self.tasks > 1 else ''} ({self.load:.1f} units)"
        price = _prices(self.prices)
        giver, taker = self.route[0], self.route[-1]
        if self.reason == "move_back":
            return f"{giver} moved {what} back to {taker}{price}"
        if self.reason == "leave":
            return f"{what} returned from {giver} to {taker}: a participant on their way left"
        if len(self.route) > 2:
            via = ", ".join(self.route[1:-1])
            return f"{giver} shed {what} to {taker} through {via} (a chained move){price}"
        return f"{giver} shed {what} to {taker}{price}"


@dataclass(frozen=True)
class Act:
    start: float
    end: float
    title: str
    sentences: tuple[str, ...]
    flows: tuple[Flow, ...]
    acceptable: bool
    overloaded: bool
    seconds_to_acceptable: float | None  # from the act's start to an acceptable state that lasts
    over_at_start: tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    """One sentence of the demo's story and whether the what-if tells it too."""

    act: int
    claim: str
    holds: bool
    detail: str


def _prices(prices: Sequence[float]) -> str:
    if not prices:
        return ""
    lo, hi = min(prices), max(prices)
    return f" at {lo:.3g}" if math.isclose(lo, hi) else f" at {lo:.3g}-{hi:.3g}"


def _event_title(event: TimelineEvent) -> str:
    if event.event == "scale_load":
        what = f"{event.participant}'s load x{event.factor:g}"
    elif event.event == "task_load":
        what = f"task {event.task}'s load set to {event.load:g}"
    else:
        what = f"{event.participant} {event.event}s"
    return what + (f" ({event.note})" if event.note else "")


def _flows(moves: Sequence[MoveRecord]) -> list[Flow]:
    """Legs of one task in one operation form its route; routes aggregate per reason."""
    routes: dict[tuple[int, str], list[MoveRecord]] = {}
    for m in moves:
        routes.setdefault((m.operation, m.task), []).append(m)
    grouped: dict[tuple[tuple[str, ...], str], list[tuple[float, float]]] = {}
    for legs in routes.values():
        route = (legs[0].source, *(leg.target for leg in legs))
        reason = "offer" if legs[0].reason == "relay" and len(legs) == 1 else legs[0].reason
        grouped.setdefault((route, reason), []).append((legs[0].load, legs[0].price))
    return [
        Flow(route, reason, len(items), math.fsum(x for x, _ in items), tuple(p for _, p in items))
        for (route, reason), items in grouped.items()
    ]


def _loads_line(record: StepRecord, thresholds: dict[str, float]) -> str:
    parts = []
    for name, load in record.loads.items():
        if name not in record.marginal_costs:
            continue  # not in the federation at that time
        threshold = thresholds.get(name, math.inf)
        mark = " (over)" if load > threshold + 1e-9 else ""
        parts.append(f"{name} {load:.1f}/{threshold:.1f}{mark}")
    return ", ".join(parts)


def acts(doc: FederationDoc, result: SimulationResult) -> list[Act]:
    """The acts of ``doc``'s timeline as ``result`` played them (a trace that stopped early
    holds its last state to the end)."""
    events: dict[float, list[str]] = {}
    for e in doc.timeline:
        events.setdefault(float(e.at), []).append(_event_title(e))
    for p in doc.participants:
        if (
            p.joins_at is not None
            and p.joins_at > 0
            and not any(
                e.event == "join" and e.participant == p.name and e.at == p.joins_at
                for e in doc.timeline
            )
        ):
            events.setdefault(float(p.joins_at), []).append(f"{p.name} joins")
    end_of_run = result.trace[-1].t + 1e-9 if result.trace else 0.0
    horizon = max(doc.simulation.duration_seconds, end_of_run)
    cuts = sorted(t for t in events if 0 < t < horizon)
    starts = [0.0, *cuts]
    ends = [*cuts, horizon]
    thresholds = result.thresholds
    out: list[Act] = []
    for n, (start, end) in enumerate(zip(starts, ends, strict=True)):
        inside = [r for r in result.trace if start - 1e-9 <= r.t < end - 1e-9]
        held = [r for r in result.trace if r.t < start]
        title = f"t = {start:g} s: " + (
            "; ".join(events[start]) if start in events else "the start"
        )
        if n == 0 and 0.0 in events:
            title = "t = 0 s: " + "; ".join(events[0.0])
        first = inside[0] if inside else (held[-1] if held else None)
        last = inside[-1] if inside else (held[-1] if held else None)
        if n == 0:
            start_loads = dict(result.initial_load)
        else:
            start_loads = dict(first.loads) if first else {}
            if first is not None:
                start_loads = {k: v for k, v in start_loads.items() if k in first.marginal_costs}
        over = tuple(
            name
            for name, load in start_loads.items()
            if load > thresholds.get(name, math.inf) + 1e-9
        )
        flows = _flows([m for m in result.move_log if start - 1e-9 <= m.at < end - 1e-9])
        sentences: list[str] = []
        if over:
            verb = "is" if len(over) == 1 else "are"
            sentences.append(
                f"{', '.join(over)} {verb} over {'its' if len(over) == 1 else 'their'} "
                "threshold at the start of the act."
            )
        sentences += [f.sentence() + "." for f in flows] or ["Nothing moves."]
        ok = bool(last and last.acceptable)
        overloaded = bool(last and last.overloaded)
        since: float | None = None
        if ok and inside:
            k = len(inside) - 1
            while k > 0 and inside[k - 1].acceptable:
                k -= 1
            since = inside[k].t - start
        elif ok:
            since = 0.0
        if last is not None:
            if ok and overloaded:
                verdict = (
                    "acceptable: the federation is overloaded and every participant is at or "
                    "above its threshold"
                )
            elif ok:
                verdict = "acceptable: every participant is below its threshold"
            else:
                verdict = "not acceptable"
            when = f", from {since:g} s into the act" if since is not None and since > 0 else ""
            sentences.append(
                f"It ends {verdict}{when}. Loads/thresholds: {_loads_line(last, thresholds)}."
            )
        out.append(
            Act(start, end, title, tuple(sentences), tuple(flows), ok, overloaded, since, over)
        )
    return out


def _moved(flows: Sequence[Flow], giver: str, taker: str) -> bool:
    return any(f.route[0] == giver and f.route[-1] == taker and f.reason != "leave" for f in flows)


def _reached(flows: Sequence[Flow], taker: str) -> bool:
    return any(f.route[-1] == taker and f.reason != "leave" for f in flows)


def _did(act: Act) -> str:
    moved = "; ".join(f.sentence() for f in act.flows) or "nothing moved"
    state = (
        "overloaded, acceptable"
        if act.acceptable and act.overloaded
        else "acceptable"
        if act.acceptable
        else "not acceptable"
    )
    return f"{moved}; ended {state}"


def demo_comparison(doc: FederationDoc, story: Sequence[Act]) -> list[Claim]:
    """The README's demo story, claim by claim, against the what-if's acts; [] for any other
    federation. A claim that fails says what the simulation did instead."""
    if doc.name != DEMO_FEDERATION:
        return []
    claims: list[Claim] = []

    def claim(n: int, text: str, test: bool) -> None:
        detail = (
            "as in make demo"
            if test
            else (
                f"the what-if: {_did(story[n])}"
                if n < len(story)
                else "the what-if has no such act"
            )
        )
        claims.append(Claim(n + 1, text, test, detail))

    one = story[0] if story else None
    claim(0, "A starts over its threshold", bool(one and "A" in one.over_at_start))
    claim(
        0,
        "A sheds to B and C",
        bool(one and _moved(one.flows, "A", "B") and _moved(one.flows, "A", "C")),
    )
    claim(0, "the act ends acceptable", bool(one and one.acceptable and not one.overloaded))
    two = story[1] if len(story) > 1 else None
    claim(1, "B's load grows and the federation is overloaded", bool(two and two.overloaded))
    claim(1, "B sheds what C can take", bool(two and _moved(two.flows, "B", "C")))
    three = story[2] if len(story) > 2 else None
    claim(2, "D joins and load reaches D through C", bool(three and _reached(three.flows, "D")))
    claim(
        2,
        "every participant ends below its threshold",
        bool(three and three.acceptable and not three.overloaded),
    )
    return claims
