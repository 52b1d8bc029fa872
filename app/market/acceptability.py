"""Is an allocation acceptable, and if not, why not: the one rule every view uses. Pure.

DESIGN.md ("Acceptable allocation"; Balazinska et al., NSDI 2004, section 4): every participant
is below its capacity threshold, or, when the total offered load exceeds the total capacity (the
sum of the thresholds), every participant is at or above its threshold. A participant over its
threshold while another has room is *not* acceptable, whether or not a contract would let the
load move; the explanation then says what blocks it (no contract path, or prices on every path
that one side would refuse).

Users: the admin overview (measured loads), the simulator and its what-if summary, the
large-federation rounds (``app.market.rounds``, counted per round and on Spark through
``acceptable_from_counts``), and the live demo.

Judged at task granularity, with the hysteresis band and, for measured loads, a tolerance:

- *over*: load above ``threshold * (1 + tolerance)`` and shedding its smallest task would pay at
  the threshold price: its average marginal cost of removing that task exceeds
  ``price + delta``. Without a finite threshold price (a participant without contracts, whose
  threshold is its capacity) being over is being over. Without a cost model the test is on
  loads alone: shedding the task brings it closer to the threshold (``load - task / 2 >
  threshold``).
- *room* (for a task of size s): load below ``threshold * (1 - tolerance)`` and taking the task
  keeps its marginal cost below ``price - delta`` (without a cost model: ``load + s / 2 <
  threshold``). In an overloaded federation s is the federation's smallest task; when explaining
  an over participant, its own smallest task.

``price`` is the threshold's price: given, or the cost model's derivative at the threshold
(thresholds are where the marginal cost meets the contracts' mean midpoint price). Integer loads
with unit tasks and no model, as in the rounds, make *over* ``load > threshold`` and *room*
``load < threshold`` exactly.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.market.cost_models import CostModel, marginal_cost

# Agents measure load; a participant a hair over its threshold is not overloaded (1%).
MEASURED_TOLERANCE = 0.01
# Explanations for at most this many offenders, then a count: a 100,000-participant federation
# needs a few reasons, not 100,000.
MAX_EXPLAINED = 5


@dataclass(frozen=True)
class Position:
    """One participant's standing against its threshold.

    ``smallest_task``: the smallest task it hosts (None: unknown or none). ``model`` and ``price``
    refine the granularity test with marginal costs and give the explanation its prices.
    ``shed_reservation`` / ``take_reservation`` override, for the explanation only, the most it
    pays per unit to shed a task and the least it takes per unit for one (default: from
    ``model``, with the band).
    """

    name: str
    load: float
    threshold: float
    smallest_task: float | None = None
    model: CostModel | None = None
    price: float | None = None
    shed_reservation: float | None = None
    take_reservation: float | None = None

    def threshold_price(self) -> float | None:
        if self.price is not None:
            return self.price
        if self.model is None:
            return None
        return self.model.derivative(self.threshold)


@dataclass(frozen=True)
class Link:
    """A contract between two participants with its price range per unit load per second."""

    a: str
    b: str
    price_min: float = 0.0
    price_max: float = math.inf


@dataclass(frozen=True)
class Acceptability:
    acceptable: bool
    overloaded: bool  # total load exceeds the total of the thresholds
    total_load: float
    total_threshold: float
    offenders: tuple[str, ...]
    # One sentence per offender (the first MAX_EXPLAINED, then a count), e.g. "A is over its
    # threshold (130.0 > 100.0) and no contract path leads from A to spare capacity (C, D)".
    reasons: tuple[str, ...]

    @property
    def summary(self) -> str:
        if self.acceptable:
            if self.overloaded:
                return (
                    "acceptable: the federation is overloaded and every participant is at or "
                    "above its threshold"
                )
            return "acceptable: every participant is below its capacity threshold"
        return "not acceptable: " + "; ".join(self.reasons)


def acceptable_from_counts(*, overloaded: bool, over: int, with_room: int) -> bool:
    """The rule on counts: nobody over when the federation fits, nobody with room when not.

    For callers that count in bulk (NumPy, Spark) with the per-participant tests of this module.
    """
    return with_room == 0 if overloaded else over == 0


def is_over(p: Position, *, delta: float = 0.0, tolerance: float = 0.0) -> bool:
    if not p.load > p.threshold * (1.0 + tolerance):
        return False
    s = p.smallest_task
    if s is None or s <= 0:
        return True
    price = p.threshold_price()
    if p.model is None:
        return p.load - s / 2.0 > p.threshold
    if price is None or not math.isfinite(price):
        return True  # its threshold is its capacity: past it, no task is too big to shed
    return marginal_cost(p.model, p.load, -s) > price + delta


def has_room(
    p: Position, task: float | None, *, delta: float = 0.0, tolerance: float = 0.0
) -> bool:
    if not p.load < p.threshold * (1.0 - tolerance):
        return False
    if task is None or task <= 0:
        return True
    if p.model is None:
        return p.load + task / 2.0 < p.threshold
    price = p.threshold_price()
    limit = math.inf if price is None else price - delta
    return p.model.derivative(p.load + task) < limit


def judge_allocation(
    positions: Sequence[Position],
    contracts: Iterable[Link | tuple[str, str]] | None = None,
    *,
    delta: float = 0.0,
    tolerance: float = 0.0,
    explain: bool = True,
) -> Acceptability:
    """The verdict on an allocation, and, when it is not acceptable, why not.

    ``positions``: the participants taking part (online ones), in the order reasons list them.
    ``contracts``: the contract graph between them (``Link`` with price ranges, or name pairs
    for reachability only); None when unknown, then explanations only name who has room.
    Contracts naming a participant not in ``positions`` are ignored. ``delta``: the hysteresis
    band; ``tolerance``: relative slack for measured loads (``MEASURED_TOLERANCE``); exact
    loads use 0. ``explain=False`` skips the reasons (the verdict is the same; simulations judge
    every step and explain only the end).
    """
    total_load = math.fsum(p.load for p in positions)
    total_threshold = math.fsum(p.threshold for p in positions)
    overloaded = total_load > total_threshold
    if overloaded:
        sizes = [p.smallest_task for p in positions if p.smallest_task is not None]
        smallest = min(sizes) if sizes else None
        bad = [p for p in positions if has_room(p, smallest, delta=delta, tolerance=tolerance)]
    else:
        bad = [p for p in positions if is_over(p, delta=delta, tolerance=tolerance)]
    acceptable = acceptable_from_counts(
        overloaded=overloaded,
        over=0 if overloaded else len(bad),
        with_room=len(bad) if overloaded else 0,
    )
    reasons: tuple[str, ...] = ()
    if bad and explain:
        why = _Explainer(positions, contracts, delta, tolerance, total_load, total_threshold)
        shown = [why.room(p) if overloaded else why.over(p) for p in bad[:MAX_EXPLAINED]]
        if len(bad) > MAX_EXPLAINED:
            what = "have room" if overloaded else "are over their thresholds"
            shown.append(f"{len(bad) - MAX_EXPLAINED} more participants {what}")
        reasons = tuple(shown)
    return Acceptability(
        acceptable=acceptable,
        overloaded=overloaded,
        total_load=total_load,
        total_threshold=total_threshold,
        offenders=tuple(p.name for p in bad),
        reasons=reasons,
    )


# --- explanations ------------------------------------------------------------------------------


def _names(names: Sequence[str], limit: int = 8) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def _money(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else "unbounded"


class _Explainer:
    """Builds the reason sentences: who has room, and what the contract graph says about it."""

    def __init__(
        self,
        positions: Sequence[Position],
        contracts: Iterable[Link | tuple[str, str]] | None,
        delta: float,
        tolerance: float,
        total_load: float,
        total_threshold: float,
    ) -> None:
        self.positions = list(positions)
        self.by_name = {p.name: p for p in self.positions}
        self.delta, self.tolerance = delta, tolerance
        self.total_load, self.total_threshold = total_load, total_threshold
        self.graph: dict[str, list[Link]] | None = None
        if contracts is not None:
            self.graph = {p.name: [] for p in self.positions}
            for c in contracts:
                link = c if isinstance(c, Link) else Link(c[0], c[1])
                if link.a in self.graph and link.b in self.graph and link.a != link.b:
                    self.graph[link.a].append(link)
                    self.graph[link.b].append(Link(link.b, link.a, link.price_min, link.price_max))

    # Reservations for the explanation: per unit, for one task of ``size``.

    def _shed(self, p: Position, size: float | None) -> float:
        if p.shed_reservation is not None:
            return p.shed_reservation
        if p.model is None or size is None or size <= 0:
            return math.inf
        return marginal_cost(p.model, p.load, -size) - self.delta

    def _take(self, p: Position, size: float | None) -> float:
        if p.take_reservation is not None:
            return p.take_reservation
        if p.model is None:
            return -math.inf
        return marginal_cost(p.model, p.load, size or 0.0) + self.delta

    def _reachable(self, start: str) -> set[str]:
        assert self.graph is not None
        seen, queue = {start}, deque([start])
        while queue:
            at = queue.popleft()
            for link in self.graph[at]:
                if link.b not in seen:
                    seen.add(link.b)
                    queue.append(link.b)
        return seen

    def _ceilings(self, start: str, budget: float) -> dict[str, float]:
        """The highest price a chain from ``start`` can still pay at each participant.

        Leg prices never rise along a chain (a relay is paid at least what it pays on) and each
        lies in its contract's range, so a chain is feasible when every leg's floor is at most
        the lowest ceiling before it (starting from the giver's ``budget``); the best ceiling
        at each participant, by a widest-path search, decides whether a taker's reservation
        can be met there.
        """
        assert self.graph is not None
        best: dict[str, float] = {start: budget}
        heap = [(-budget, start)]
        while heap:
            neg, at = heapq.heappop(heap)
            ceiling = -neg
            if ceiling < best.get(at, -math.inf):
                continue
            for link in self.graph[at]:
                if link.price_min > ceiling or link.price_min > link.price_max:
                    continue
                room = min(ceiling, link.price_max)
                if room > best.get(link.b, -math.inf):
                    best[link.b] = room
                    heapq.heappush(heap, (-room, link.b))
        return best

    def _blocked(self, giver: Position, takers: Sequence[Position], size: float | None) -> str:
        """Why load does not flow from ``giver`` to any of ``takers``; "" when it could."""
        shed = self._shed(giver, size)
        free = self._ceilings(giver.name, math.inf)
        afford = self._ceilings(giver.name, shed) if math.isfinite(shed) else free
        rising, too_low, too_dear = [], [], []
        for t in takers:
            need = self._take(t, size)
            if t.name in afford and afford[t.name] >= need:
                return ""
            if t.name not in free:
                rising.append(t.name)
            elif free[t.name] < need:
                too_low.append(f"{t.name} ({_money(need - self.delta)})")
            else:
                too_dear.append(t.name)
        parts = []
        if too_low:
            parts.append(
                f"prices on every path are below the marginal cost of taking load at "
                f"{_names(too_low)}"
            )
        if too_dear:
            parts.append(
                f"prices on every path to {_names(too_dear)} are above {giver.name}'s marginal "
                f"cost of shedding ({_money(shed + self.delta)})"
            )
        if rising:
            parts.append(f"prices rise along every path to {_names(rising)}")
        return "; ".join(parts)

    def over(self, p: Position) -> str:
        head = f"{p.name} is over its threshold ({p.load:.1f} > {p.threshold:.1f})"
        size = p.smallest_task
        spare = [
            q
            for q in self.positions
            if q.name != p.name and has_room(q, size, delta=self.delta, tolerance=self.tolerance)
        ]
        if not spare:
            return f"{head} and nobody has room for its smallest task"
        names = [q.name for q in spare]
        verb = "has" if len(names) == 1 else "have"
        if self.graph is None:
            return f"{head} while {_names(names)} {verb} room"
        reach = self._reachable(p.name)
        linked = [q for q in spare if q.name in reach]
        if not linked:
            return (
                f"{head} and no contract path leads from {p.name} to spare capacity "
                f"({_names(names)})"
            )
        blocked = self._blocked(p, linked, size)
        cut = [q.name for q in spare if q.name not in reach]
        tail = f"; no contract path leads to {_names(cut)}" if cut else ""
        if not blocked:
            return (
                f"{head} while {_names(names)} {verb} room and a contract path at a price both "
                f"sides accept: the market has not moved the load yet{tail}"
            )
        return (
            f"{head}; contract paths lead to spare capacity "
            f"({_names([q.name for q in linked])}) but {blocked}{tail}"
        )

    def room(self, p: Position) -> str:
        head = (
            f"{p.name} has room ({p.load:.1f} < threshold {p.threshold:.1f}) while the "
            f"federation is overloaded ({self.total_load:.1f} > {self.total_threshold:.1f})"
        )
        if self.graph is None:
            return head
        givers = [
            q
            for q in self.positions
            if q.name != p.name and is_over(q, delta=self.delta, tolerance=self.tolerance)
        ]
        if not givers:
            return head
        reach = self._reachable(p.name)
        linked = [q for q in givers if q.name in reach]
        if not linked:
            return (
                f"{head} and no contract path leads to {p.name} from a participant over its "
                f"threshold ({_names([q.name for q in givers])})"
            )
        causes = [self._blocked(q, [p], q.smallest_task) for q in linked]
        if any(not c for c in causes):
            return f"{head}: the market has not moved load to it yet"
        return f"{head}; from {_names([q.name for q in linked])}: " + "; ".join(causes)


def positions_from(
    loads: Mapping[str, float],
    thresholds: Mapping[str, float],
    smallest_tasks: Mapping[str, float | None] | None = None,
) -> list[Position]:
    """Positions from plain mappings, for callers without cost models (in ``loads``' order)."""
    smallest = smallest_tasks or {}
    return [Position(n, loads[n], thresholds[n], smallest.get(n)) for n in loads]
