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


# A contract for the graph: a Link, (a, b, price_min, price_max), or (a, b) for reachability only.
Contract = Link | tuple[str, str] | tuple[str, str, float, float]


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
    contracts: Iterable[Contract] | None = None,
    *,
    delta: float = 0.0,
    tolerance: float = 0.0,
    explain: bool = True,
) -> Acceptability:
    """The verdict on an allocation, and, when it is not acceptable, why not.

    ``judge_allocation(positions, contracts=None, *, delta=0.0, tolerance=0.0, explain=True)
    -> Acceptability(acceptable, overloaded, total_load, total_threshold, offenders, reasons)``

    - ``positions``: one ``Position`` per participant taking part (the online ones), in the
      order the reasons list them: name, load, threshold, and where known its smallest hosted
      task, cost model and threshold price (default: the model's derivative at the threshold).
    - ``contracts``: the contract graph between them: ``Link(a, b, price_min, price_max)``,
      ``(a, b, price_min, price_max)`` tuples, or ``(a, b)`` pairs for reachability only.
      Contracts naming a participant not in ``positions`` are ignored. None when unknown: the
      explanation then only names who has room.
    - ``delta``: the hysteresis band of the mechanism (the federation's ``hysteresis``).
    - ``tolerance``: relative slack for measured loads (``MEASURED_TOLERANCE``); exact loads 0.
    - ``explain=False`` skips the reasons; the verdict is the same (simulations judge every step
      and explain only the end).

    The live demo, on its agents' measured loads::

        judge_allocation(
            [
                Position(name, sum(tasks.values()), thresholds[name],
                         smallest_task=min(tasks.values(), default=None), model=model)
                for name, tasks in hosted.items()
            ],
            [Link(c.a, c.b, c.price_min, c.price_max) for c in doc.contracts],
            delta=hysteresis,
            tolerance=MEASURED_TOLERANCE,
        )
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


def _edge(c: Contract) -> tuple[str, str, float, float]:
    if isinstance(c, Link):
        return c.a, c.b, c.price_min, c.price_max
    if len(c) == 4:
        return c
    return c[0], c[1], 0.0, math.inf


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
        contracts: Iterable[Contract] | None,
        delta: float,
        tolerance: float,
        total_load: float,
        total_threshold: float,
    ) -> None:
        self.positions = list(positions)
        self.by_name = {p.name: p for p in self.positions}
        self.delta, self.tolerance = delta, tolerance
        self.total_load, self.total_threshold = total_load, total_threshold
        self._components: dict[str, int] | None = None
        self._spare_by_size: dict[float | None, list[Position]] = {}
        # Adjacency: participant -> (partner, price_min, price_max), both directions.
        self.graph: dict[str, list[tuple[str, float, float]]] | None = None
        if contracts is not None:
            self.graph = {p.name: [] for p in self.positions}
            for c in contracts:
                a, b, lo, hi = _edge(c)
                if a in self.graph and b in self.graph and a != b:
                    self.graph[a].append((b, lo, hi))
                    self.graph[b].append((a, lo, hi))

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
        # As the taker accepts (DESIGN.md, "j accepts the subset that keeps its MC below p"):
        # its marginal cost after taking the task, plus the band.
        return p.model.derivative(p.load + (size or 0.0)) + self.delta

    def _component(self, name: str) -> int:
        """The connected component of the contract graph ``name`` belongs to (found once)."""
        assert self.graph is not None
        if self._components is None:
            self._components = {}
            for root in self.graph:
                if root in self._components:
                    continue
                mark = len(self._components)
                self._components[root] = mark
                queue = deque([root])
                while queue:
                    at = queue.popleft()
                    for partner, _, _ in self.graph[at]:
                        if partner not in self._components:
                            self._components[partner] = mark
                            queue.append(partner)
        return self._components[name]

    def _ceilings(
        self, start: str, budget: float, needs: Mapping[str, float] | None = None
    ) -> tuple[dict[str, float], bool]:
        """The highest price a chain from ``start`` can still pay at each participant.

        Leg prices never rise along a chain (a relay is paid at least what it pays on) and each
        lies in its contract's range, so a chain is feasible when every leg's floor is at most
        the lowest ceiling before it (starting from the giver's ``budget``); the best ceiling
        at each participant, by a widest-path search, decides whether a taker's reservation
        can be met there. With ``needs`` (taker -> reservation) the search stops at the first
        taker whose reservation is met, and says so.
        """
        assert self.graph is not None
        best: dict[str, float] = {start: budget}
        heap = [(-budget, start)]
        while heap:
            neg, at = heapq.heappop(heap)
            ceiling = -neg
            if ceiling < best[at]:
                continue
            if needs is not None and at in needs and ceiling >= needs[at]:
                return best, True  # popped in falling ceiling order: this one is final
            for partner, lo, hi in self.graph[at]:
                if lo > ceiling or lo > hi:
                    continue
                room = min(ceiling, hi)
                if room > best.get(partner, -math.inf):
                    best[partner] = room
                    heapq.heappush(heap, (-room, partner))
        return best, False

    def _blocked(self, giver: Position, takers: Sequence[Position], size: float | None) -> str:
        """Why load does not flow from ``giver`` to any of ``takers``; "" when it could."""
        shed = self._shed(giver, size)
        needs = {t.name: self._take(t, size) for t in takers if t.name != giver.name}
        if self._ceilings(giver.name, shed, needs)[1]:
            return ""
        free, _ = self._ceilings(giver.name, math.inf)
        rising, too_low, too_dear = [], [], []
        for t in takers:
            need = needs[t.name]
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

    def _spare(self, size: float | None) -> list[Position]:
        """Everyone with room for a task of ``size`` (cached per size)."""
        if size not in self._spare_by_size:
            self._spare_by_size[size] = [
                q
                for q in self.positions
                if has_room(q, size, delta=self.delta, tolerance=self.tolerance)
            ]
        return self._spare_by_size[size]

    def over(self, p: Position) -> str:
        head = f"{p.name} is over its threshold ({p.load:.1f} > {p.threshold:.1f})"
        size = p.smallest_task
        spare = [q for q in self._spare(size) if q.name != p.name]
        if not spare:
            return f"{head} and nobody has room for its smallest task"
        names = [q.name for q in spare]
        verb = "has" if len(names) == 1 else "have"
        if self.graph is None:
            return f"{head} while {_names(names)} {verb} room"
        mine = self._component(p.name)
        linked = [q for q in spare if self._component(q.name) == mine]
        if not linked:
            return (
                f"{head} and no contract path leads from {p.name} to spare capacity "
                f"({_names(names)})"
            )
        blocked = self._blocked(p, linked, size)
        cut = [q.name for q in spare if self._component(q.name) != mine]
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
        mine = self._component(p.name)
        linked = [q for q in givers if self._component(q.name) == mine]
        if not linked:
            return (
                f"{head} and no contract path leads to {p.name} from a participant over its "
                f"threshold ({_names([q.name for q in givers])})"
            )
        causes = []
        for q in linked[:MAX_EXPLAINED]:
            cause = self._blocked(q, [p], q.smallest_task)
            if not cause:
                return f"{head}: {q.name} could shed load to it, the market has not moved it yet"
            causes.append(f"from {q.name}: {cause}")
        if len(linked) > MAX_EXPLAINED:
            causes.append(f"{len(linked) - MAX_EXPLAINED} more over their thresholds not examined")
        return f"{head}; " + "; ".join(causes)


def positions_from(
    loads: Mapping[str, float],
    thresholds: Mapping[str, float],
    smallest_tasks: Mapping[str, float | None] | None = None,
) -> list[Position]:
    """Positions from plain mappings, for callers without cost models (in ``loads``' order)."""
    smallest = smallest_tasks or {}
    return [Position(n, loads[n], thresholds[n], smallest.get(n)) for n in loads]
