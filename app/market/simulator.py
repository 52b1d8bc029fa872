"""Deterministic discrete-time simulation of a federation under the Bounded-Price Mechanism.

The what-if Spark job imports exactly ``simulate`` and ``SimulationResult``; ``summary()`` is the
content of ``summary.json``.

Time advances in steps of ``simulation.step_seconds``. At each step, timeline events due by then
are applied (``scale_load`` scales the tasks a participant *owns*, wherever they run: its input
rate changed; ``task_load`` sets one task's load; ``join``/``leave``, and ``joins_at``), then,
every ``offer_interval_seconds``, one offer round runs, then payments accrue for the step.

An offer round visits the online participants from the highest marginal cost down (ties by
name). Each participant makes at most one offer per round, and one that took part in a move this
round (as giver, relay or taker) makes none: one offer outstanding, none while a move is in
flight. Its offer is, in order:

1. a move-back, when a task it hosts has stayed the contract's ``min_move_seconds`` and
   returning it to where it came from is cheaper for both at their agreed price;
2. a forward offer to its partners, cheapest contract first (``app.market.bpm``);
3. if no partner can take anything, the offer is forwarded breadth-first along the partners'
   own contracts, shortest chains first and by default as far as it takes (``max_hops`` caps
   it): a chained move A -> B -> C -> ...; each relay hosts nothing and is paid at least what
   it pays on, so prices never rise along the chain. A task never revisits a participant on
   its chain: load only goes home by a move-back.

A task moved under a contract stays put (no forward move, no move-back) for that contract's
``min_move_seconds``. When a participant leaves, tasks it hosted or relayed for others return
to whoever gave them to it, and its own tasks leave with it.

Once a round moves nothing, no event is pending and no task is still inside its minimum move
duration, nothing can change any more: the run stops early and the rest of the duration's
payments are added at the final rate (the trace ends there).

Replicas (``app.market.copies``): a task asking for k replicas runs as k + 1 copies, each load like
any other. Replicas are placed as the registry places them (``app.availability.place_replicas``:
the owner's partners whose contract allows replica hosting, cheapest first), and the owner pays
the host at the contract's minimum price; from there a replica is offered, relayed and moved back
as any task, except that it only travels over replica-hosting contracts and never to a
participant that hosts another copy of its task. A replica with no legal host (none eligible at
the start, or its host left and the way back is closed) is unplaced, and placing it is tried again
after every join and leave.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.availability.placement import PlacementError, ReplicaCandidate, place_replicas
from app.federation.document import FederationDoc
from app.market import bpm, copies, protocol
from app.market.acceptability import Acceptability, Link, Position, judge_allocation
from app.market.cost_models import (
    CostModel,
    MM1Cost,
    build_cost_model,
    marginal_cost,
    mm1_removal_savings,
)
from app.market.lower_bound import component_bound, components, cost_lower_bound

# Load travels over as many contracts as it takes (DESIGN.md: "load can travel over several
# hops"); short chains are tried first. A cap of 2 (A -> B -> C only) left a participant far
# above its threshold whenever its whole 2-hop neighbourhood had filled up while the rest of
# the federation had room (bench/whatif/diagnose.py: "fits_beyond_2" and most "past_capacity").
DEFAULT_MAX_HOPS: int | None = None


@dataclass(frozen=True)
class StepRecord:
    t: float
    loads: dict[str, float]
    marginal_costs: dict[str, float]
    acceptable: bool
    overloaded: bool = False
    cost: float = 0.0
    offers: int = 0
    moves: int = 0


@dataclass(frozen=True)
class MoveRecord:
    """One leg of one task's relocation: ``source`` hands ``task`` to ``target`` at ``price``.

    ``giver_mc`` is what the giver saves per unit (its incremental marginal cost of removing the
    task) and ``taker_mc`` what the taker's cost rises per unit; both are NaN on the inner legs
    of a relay, where the relay's own cost does not change. ``cost_change`` is the change of the
    federation's total cost made by the whole operation the leg belongs to.
    """

    task: str
    source: str
    target: str
    reason: str  # offer | relay | move_back | leave
    at: float
    price: float
    load: float = 0.0
    giver_mc: float = math.nan
    taker_mc: float = math.nan
    cost_change: float = 0.0
    operation: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "from": self.source,
            "to": self.target,
            "reason": self.reason,
            "at": self.at,
            "price": self.price,
            "load": self.load,
        }


def _json_float(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class SimulationResult:
    acceptable: bool
    steps_to_acceptable: int | None
    seconds_to_acceptable: float | None
    moves: int
    payments_total: float
    cost: float
    cost_lower_bound: float
    final_load: dict[str, float]
    thresholds: dict[str, float]
    trace: list[StepRecord] = field(default_factory=list)
    move_log: list[MoveRecord] = field(default_factory=list)
    net_payments: dict[str, float] = field(default_factory=dict)
    ledger: dict[str, float] = field(default_factory=dict)  # "payer->payee" -> amount
    overloaded: bool = False
    offers: int = 0
    steps: int = 0
    reasons: tuple[str, ...] = ()
    # Copy name -> its task, and where each copy was placed at the start and is at the end
    # (replicas without a legal host are absent and listed in ``unplaced_replicas``).
    copy_of: dict[str, str] = field(default_factory=dict)
    initial_hosts: dict[str, str] = field(default_factory=dict)
    final_hosts: dict[str, str] = field(default_factory=dict)
    unplaced_replicas: tuple[str, ...] = ()
    # The final verdict on one line, and why a cost or its bound is infinite (None: finite).
    verdict: str = ""
    cost_note: str | None = None
    cost_lower_bound_note: str | None = None
    # Loads before the first offer round (trace[0] is already after it), for the plots' start.
    initial_load: dict[str, float] = field(default_factory=dict)
    # Simulated seconds covered: a trace that stopped early (nothing could change any more)
    # holds its last state until here.
    horizon_seconds: float = 0.0

    @property
    def cost_ratio(self) -> float | None:
        """Final cost over the lower bound; None when either is infinite or the bound is 0."""
        if math.isfinite(self.cost) and math.isfinite(self.cost_lower_bound):
            return self.cost / self.cost_lower_bound if self.cost_lower_bound > 0 else None
        return None

    def summary(self) -> dict[str, Any]:
        """The JSON summary. JSON has no infinity: an infinite cost (a participant at or past
        capacity under M/M/1) is written as null, and ``cost_note`` says who and why."""
        verdict = (
            self.verdict
            or
            # a result built elsewhere (the node simulation) has none
            ("acceptable" if self.acceptable else "not acceptable: " + "; ".join(self.reasons))
        )
        return {
            "verdict": verdict,
            "acceptable": self.acceptable,
            "steps_to_acceptable": self.steps_to_acceptable,
            "seconds_to_acceptable": self.seconds_to_acceptable,
            "moves": self.moves,
            "payments_total": self.payments_total,
            "cost": _json_float(self.cost),
            "cost_lower_bound": _json_float(self.cost_lower_bound),
            "cost_ratio": self.cost_ratio,
            "cost_note": self.cost_note,
            "cost_lower_bound_note": self.cost_lower_bound_note,
            "final_load": dict(self.final_load),
            "thresholds": dict(self.thresholds),
            "overloaded": self.overloaded,
            "offers": self.offers,
            "steps": self.steps,
            "why_not_acceptable": list(self.reasons),
        }


@dataclass(frozen=True)
class _Edge:
    partner: int
    contract: int
    price_min: float
    price_max: float
    min_move: float
    replicas: bool = False  # the contract's availability terms allow replica hosting


@dataclass(frozen=True)
class _Hop:
    source: int
    target: int
    contract: int
    price: float
    at: float
    min_move: float
    # A replica's placement: paid like a hop, but not a move (no move-back, no lock).
    placement: bool = False


class _Task:
    """One copy of a task: the primary (``copy.index == 0``) or one of its replicas."""

    __slots__ = ("chain", "copy", "hops", "host", "load", "name", "owner", "placed")

    def __init__(
        self, name: str, owner: int, load: float, host: int, copy: copies.Copy | None = None
    ) -> None:
        self.copy = copy or copies.Copy(name)
        self.name = self.copy.name
        self.owner = owner
        self.load = load
        self.host = host
        self.hops: list[_Hop] = []
        self.chain: set[int] = {owner, host}
        # Primaries are always placed; a replica until it finds a legal host is not.
        self.placed = not self.copy.is_replica

    def locked(self, now: float) -> bool:
        return bool(self.hops) and now - self.hops[-1].at < self.hops[-1].min_move


class _Federation:
    def __init__(self, doc: FederationDoc, max_hops: int | None) -> None:
        self.names = [p.name for p in doc.participants]
        index = {n: i for i, n in enumerate(self.names)}
        self.index = index
        self.models: list[CostModel] = [
            build_cost_model(p.cost_model, p.capacity) for p in doc.participants
        ]
        self.delta = doc.simulation.hysteresis
        self.max_hops = max_hops
        self.online = [not (p.joins_at is not None and p.joins_at > 0) for p in doc.participants]
        self.edges: list[list[_Edge]] = [[] for _ in self.names]
        self.contract_pairs: list[tuple[str, str]] = []
        self.links: list[Link] = []
        for c_id, c in enumerate(doc.contracts):
            a, b = index[c.a], index[c.b]
            self.contract_pairs.append((c.a, c.b))
            self.links.append(Link(c.a, c.b, c.price_min, c.price_max))
            hosting = c.availability is not None and c.availability.replica_hosting
            for me, other in ((a, b), (b, a)):
                self.edges[me].append(
                    _Edge(other, c_id, c.price_min, c.price_max, c.min_move_seconds, hosting)
                )
        for i, edges in enumerate(self.edges):
            # Cheapest contract first; ties by partner name so runs are reproducible.
            edges.sort(key=lambda e: (e.price_min, e.price_max, self.names[e.partner]))
            self.edges[i] = edges
        self.tasks = [
            _Task(t.name, index[t.owner], t.load, index[t.initial_host]) for t in doc.tasks
        ]
        # Replicas after every primary, so a federation without replicas is unchanged.
        self.tasks += [
            _Task(t.name, index[t.owner], t.load, index[t.owner], c)
            for t in doc.tasks
            for c in copies.copies_of(t.name, t.replicas)[1:]
        ]
        self.copies: dict[str, list[int]] = {}
        for k, task in enumerate(self.tasks):
            self.copies.setdefault(task.copy.task, []).append(k)
        self.task_index = {t.name: k for k, t in enumerate(self.tasks)}
        self.has_replicas = any(t.copy.is_replica for t in self.tasks)
        self.hosted: list[set[int]] = [set() for _ in self.names]
        self.loads = [0.0] * len(self.names)
        self.thresholds = [0.0] * len(self.names)
        self.prices = [0.0] * len(self.names)
        self.move_log: list[MoveRecord] = []
        # M/M/1 parameters as arrays for the round's one vectorised test (others: NaN, unused).
        self._capacity = np.array(
            [m.capacity if isinstance(m, MM1Cost) else np.nan for m in self.models]
        )
        self._scale = np.array([m.scale if isinstance(m, MM1Cost) else np.nan for m in self.models])
        # The lowest price each participant could shed at, plus the band (``_offer``'s bar).
        self._bar = np.array(
            [
                min((e.price_min for e in edges), default=math.inf) + self.delta
                for edges in self.edges
            ]
        )
        self._version = [0] * len(self.names)
        self._flags: list[tuple[int, list[int], bool, bool] | None] = [None] * len(self.names)
        # Each participant's smallest task (for the verdict), kept until its tasks change.
        self._smallest: list[tuple[int, float | None] | None] = [None] * len(self.names)
        self.relocations = 0
        self.operations = 0
        self.offers = 0
        self._rebuild()
        self.initial_hosts = self.host_names()
        self.initial_loads = {n: self.loads[i] for i, n in enumerate(self.names) if self.online[i]}

    # --- state -------------------------------------------------------------------------

    def active(self, task: _Task) -> bool:
        return self.online[task.owner] and task.placed

    def held(self, who: int) -> set[str]:
        """The tasks ``who`` hosts a copy of."""
        return {self.tasks[k].copy.task for k in self.hosted[who]}

    def host_names(self) -> dict[str, str]:
        return {
            t.name: self.names[t.host]
            for hosted in self.hosted
            for t in (self.tasks[k] for k in hosted)
        }

    def _unplace(self, task: _Task) -> None:
        task.placed, task.host, task.hops, task.chain = False, task.owner, [], {task.owner}

    def _rebuild(self) -> None:
        """Recompute hosted sets, loads and thresholds from scratch after an event."""
        for s in self.hosted:
            s.clear()
        for k, task in enumerate(self.tasks):
            if self.active(task):
                if not self.online[task.host]:
                    if task.copy.is_replica:
                        self._unplace(task)
                        continue
                    task.host, task.hops, task.chain = task.owner, [], {task.owner}
                self.hosted[task.host].add(k)
        self._recount()
        self._place_replicas()
        for i, model in enumerate(self.models):
            ranges = [
                (e.price_min, e.price_max) for e in self.edges[i] if self.online[e.partner]
            ] or [(e.price_min, e.price_max) for e in self.edges[i]]
            price = bpm.threshold_price(ranges)
            self.prices[i] = price if price is not None else model.derivative(model.capacity)
            self.thresholds[i] = bpm.capacity_threshold(model, ranges)

    def _place_replicas(self) -> None:
        """Give every unplaced replica of an online owner a host, as the registry would."""
        for task in self.tasks:
            if task.placed or not self.online[task.owner]:
                continue
            others = [
                self.tasks[k]
                for k in self.copies[task.copy.task]
                if k != self.task_index[task.name]
            ]
            taken = [self.names[t.host] for t in others if self.active(t)]
            edges = {e.partner: e for e in self.edges[task.owner] if self.online[e.partner]}
            candidates = [
                ReplicaCandidate(
                    participant=self.names[j],
                    hosts_replicas=e.replicas,
                    load=self.loads[j],
                    capacity=self.models[j].capacity,
                    price=e.price_min,
                )
                for j, e in sorted(edges.items())
            ]
            try:
                placement = place_replicas(
                    task.name,
                    task_load=task.load,
                    k=len(taken),  # the primary's host plus the other replicas, plus this one
                    primary_host=taken[0] if taken else self.names[task.owner],
                    candidates=candidates,
                    existing=taken[1:],
                )
            except PlacementError:
                continue
            if not placement.hosts:
                continue
            j = self.index[placement.hosts[0]]
            edge = edges[j]
            task.placed, task.host, task.chain = True, j, {task.owner, j}
            task.hops = [_Hop(task.owner, j, edge.contract, edge.price_min, -math.inf, 0.0, True)]
            self.hosted[j].add(self.task_index[task.name])
            self.loads[j] += task.load
            self._touch(j)

    def _recount(self) -> None:
        self._touch(*range(len(self.names)))
        for i, hosted in enumerate(self.hosted):
            self.loads[i] = math.fsum(self.tasks[k].load for k in hosted)

    def total_cost(self) -> float:
        return math.fsum(
            self.models[i].cost(self.loads[i]) for i in range(len(self.names)) if self.online[i]
        )

    def positions(self) -> list[Position]:
        """The online participants' standings, for ``acceptability.judge_allocation``."""
        out = []
        for i, name in enumerate(self.names):
            if not self.online[i]:
                continue
            cached = self._smallest[i]
            if cached is None or cached[0] != self._version[i]:
                sizes = [self.tasks[k].load for k in self.hosted[i] if self.tasks[k].load > 0]
                cached = self._smallest[i] = (self._version[i], min(sizes) if sizes else None)
            out.append(
                Position(
                    name=name,
                    load=self.loads[i],
                    threshold=self.thresholds[i],
                    smallest_task=cached[1],
                    model=self.models[i],
                    price=self.prices[i],
                )
            )
        return out

    def judge(self, *, explain: bool) -> Acceptability:
        """The one acceptability rule on the current state, over the contract graph."""
        return judge_allocation(self.positions(), self.links, delta=self.delta, explain=explain)

    def pending_timers(self, now: float) -> bool:
        return any(self.tasks[k].locked(now) for hosted in self.hosted for k in hosted)

    # --- events ------------------------------------------------------------------------

    def join(self, who: int) -> None:
        self.online[who] = True
        self._rebuild()

    def leave(self, who: int, now: float) -> None:
        self.online[who] = False
        for task in self.tasks:
            if task.owner == who:
                if task.copy.is_replica:
                    self._unplace(task)  # placed afresh when the owner is back
                else:
                    task.host, task.hops, task.chain = who, [], {who}
                continue
            if not task.placed or who not in task.chain or not task.hops:
                continue
            cut = next((n for n, h in enumerate(task.hops) if who in (h.source, h.target)), None)
            if cut is None:
                continue
            home = task.hops[cut].source
            if task.copy.is_replica and (
                task.hops[cut].placement or task.copy.task in self.held(home)
            ):
                # Its placement host left (a replica never goes "home" to the owner), or the way
                # back holds another copy: it is placed afresh below.
                self.hosted[task.host].discard(self.task_index[task.name])
                self._unplace(task)
                continue
            self.move_log.append(
                MoveRecord(
                    task.name,
                    self.names[task.host],
                    self.names[home],
                    "leave",
                    now,
                    0.0,
                    task.load,
                    operation=self._next_operation(),
                )
            )
            self.relocations += 1
            self.hosted[task.host].discard(self.task_index[task.name])
            self.hosted[home].add(self.task_index[task.name])
            task.hops = task.hops[:cut]
            task.host = home
            task.chain = {task.owner, home} | {h.target for h in task.hops}
        self._rebuild()

    def scale_owned(self, who: int, factor: float) -> None:
        for task in self.tasks:
            if task.owner == who:
                task.load *= factor
        self._recount()

    def set_task_load(self, name: str, load: float) -> None:
        for k in self.copies[name]:  # a replica runs what its primary runs
            self.tasks[k].load = load
        self._recount()

    def _next_operation(self) -> int:
        self.operations += 1
        return self.operations

    # --- one offer round -----------------------------------------------------------------

    def offer_round(self, now: float) -> int:
        """Every participant's turn; returns the number of tasks relocated."""
        before = self.relocations
        order = sorted(
            (i for i in range(len(self.names)) if self.online[i]),
            key=lambda i: (-self.models[i].derivative(self.loads[i]), self.names[i]),
        )
        busy: set[int] = set()
        willing, returning = self._round_flags(now)
        for i in order:
            # Offers are answered within the round, so none is left outstanding and there is no
            # refusal to back off from; a participant that took part in a move is in flight.
            gate = protocol.OfferGate(now=now, moves_in_flight=int(i in busy))
            if not self.hosted[i] or not protocol.may_offer(gate):
                continue
            involved = (returning[i] and self._move_back(i, now)) or (
                self._offer(i, now) if willing[i] else None
            )
            if involved:
                busy |= involved
        return self.relocations - before

    def _round_flags(self, now: float) -> tuple[list[bool], list[bool]]:
        """For every participant at the start of a round: whether it has a task worth shedding
        on its own at its cheapest contract's floor (``_offer``'s first test: without one it
        offers nothing) and whether it hosts a task it could move back (``_move_back``'s
        candidates: without one it returns nothing).

        Both stay valid for the whole round: a participant's load and tasks change only in a
        move it takes part in, and then it is in flight and makes no offer this round. Across
        rounds they are kept until the participant's tasks or loads change (``_touch``) or one
        of the tasks that were locked unlocks; the stale ones are recomputed together, the
        savings of all their M/M/1 tasks in one NumPy pass (``cost_models.mm1_removal_savings``,
        the same doubles as ``marginal_cost``), other cost models task by task.
        """
        n = len(self.names)
        willing, returning = [False] * n, [False] * n
        stale: list[tuple[int, list[int], bool]] = []
        hosts: list[int] = []
        sizes: list[float] = []
        for i, hosted in enumerate(self.hosted):
            if not hosted or not self.online[i]:
                continue
            entry = self._flags[i]
            if (
                entry is not None
                and entry[0] == self._version[i]
                and all(self.tasks[k].locked(now) for k in entry[1])
            ):
                willing[i], returning[i] = entry[2], entry[3]
                continue
            locked: list[int] = []
            back = False
            own: list[float] = []
            for k in hosted:
                task = self.tasks[k]
                if task.locked(now):
                    locked.append(k)
                    continue
                if task.load > 0:
                    own.append(task.load)
                    hop = task.hops[-1] if task.hops else None
                    back = back or (
                        hop is not None and not hop.placement and self.online[hop.source]
                    )
            returning[i] = back
            if own and self.edges[i]:
                model = self.models[i]
                if isinstance(model, MM1Cost):
                    hosts.extend([i] * len(own))
                    sizes.extend(own)
                else:
                    load, bar = self.loads[i], self._bar[i]
                    willing[i] = any(marginal_cost(model, load, -size) > bar for size in own)
            stale.append((i, locked, back))
        if hosts:
            at = np.asarray(hosts, dtype=np.int64)
            loads = np.asarray(self.loads, dtype=np.float64)
            saving = mm1_removal_savings(
                self._capacity[at], self._scale[at], loads[at], np.asarray(sizes)
            )
            for i in at[saving > self._bar[at]].tolist():
                willing[i] = True
        for i, locked, back in stale:
            self._flags[i] = (self._version[i], locked, willing[i], back)
        return willing, returning

    def _touch(self, *who: int) -> None:
        """``who``'s tasks or load changed: its round flags are stale."""
        for i in who:
            self._version[i] += 1

    def _move_back(self, i: int, now: float) -> set[int] | None:
        model, delta = self.models[i], self.delta
        candidates = [
            (self.tasks[k].name, self.tasks[k].load)
            for k in self.hosted[i]
            if self.tasks[k].hops
            and not self.tasks[k].hops[-1].placement
            and not self.tasks[k].locked(now)
            and self.online[self.tasks[k].hops[-1].source]
        ]
        origin: int | None = None
        removed = added = 0.0
        chosen: list[tuple[_Task, float, float]] = []
        for name, size in bpm.rank_for_shedding(candidates):
            task = self.tasks[self.task_index[name]]
            hop = task.hops[-1]
            if origin is not None and hop.source != origin:
                continue
            o = hop.source
            if self.has_replicas and task.copy.task in self.held(o):
                # Never two copies of one task on one participant (without replicas every task
                # has one copy, here, so the origin cannot hold another).
                continue
            host_load, origin_load = self.loads[i] - removed, self.loads[o] + added
            back = protocol.move_back(
                protocol.Placement(task.name, size, self.names[o], hop.price, hop.at, hop.min_move),
                protocol.Side(model, host_load),
                protocol.Side(self.models[o], origin_load),
                now=now,
                delta=delta,
            )
            if back is None:
                continue
            origin = o
            chosen.append((task, back.host_saving, back.origin_cost))
            removed += size
            added += size
        if origin is None:
            return None
        self.offers += 1
        change = self._cost_change(i, origin, removed)
        op = self._next_operation()
        for task, giver_mc, taker_mc in chosen:
            hop = task.hops.pop()
            self._relocate(task, i, origin)
            task.chain.discard(i)
            self.move_log.append(
                MoveRecord(
                    task.name,
                    self.names[i],
                    self.names[origin],
                    "move_back",
                    now,
                    hop.price,
                    task.load,
                    giver_mc,
                    taker_mc,
                    change,
                    op,
                )
            )
            self.relocations += 1
        return {i, origin}

    def _paths(self, i: int, budget: float = math.inf) -> Iterator[list[_Edge]]:
        """Contract paths from ``i``: its own contracts first, then forwarding, shortest first.

        A relay is paid at least what it pays on, so prices never rise along a chain: a path
        is only extended over a contract whose floor is at most the lowest ceiling so far, and
        never over one whose floor exceeds ``budget``, the most the giver could pay per unit.
        Within those rules a participant is reached again by a longer path only when it leaves
        a strictly higher ceiling (more price room for the taker), so fixed-price contracts
        still find the one route whose prices do not rise, and the search ends (each
        participant is reached at most once per distinct ceiling).

        Lazily, one whole level at a time: a giver whose offer a direct partner takes (the
        common case) never pays for the search further out. The order is that of the full list.
        """
        best = {i: math.inf}
        layer: list[tuple[list[_Edge], float]] = [([], math.inf)]
        depth = 0
        while layer and (self.max_hops is None or depth < self.max_hops):
            depth += 1
            nxt: list[tuple[list[_Edge], float]] = []
            for path, ceiling in layer:
                at = path[-1].partner if path else i
                on_path = {i, *(e.partner for e in path)}
                for edge in self.edges[at]:
                    j = edge.partner
                    if j in on_path or not self.online[j]:
                        continue
                    if edge.price_min > ceiling or edge.price_min > budget:
                        continue
                    room = min(ceiling, edge.price_max)
                    if room <= best.get(j, -math.inf):
                        continue
                    best[j] = room
                    nxt.append(([*path, edge], room))
            for path, _ in nxt:
                yield path
            layer = nxt

    def _offer(self, i: int, now: float) -> set[int] | None:
        model, delta, load = self.models[i], self.delta, self.loads[i]
        movable = [
            (self.tasks[k].name, self.tasks[k].load)
            for k in self.hosted[i]
            if not self.tasks[k].locked(now)
        ]
        if not movable or not self.edges[i]:
            return None
        ranked = bpm.rank_for_shedding(movable)
        lowest = min(e.price_min for e in self.edges[i])
        if not bpm.worth_offering(model, load, ranked, lowest, delta):
            return None  # nothing is worth shedding even at its cheapest contract's floor
        offered_any = False
        # What shedding each task on its own saves per unit: the same on every path, so computed
        # once here rather than per path (``bpm.offer_list``'s test, on the same doubles).
        saving = {name: marginal_cost(model, load, -size) for name, size in ranked}
        # Per unit, no set of tasks saves more than the marginal cost of the last unit.
        budget = model.derivative(load) - delta
        tasks = [(item, self.tasks[self.task_index[item[0]]]) for item in ranked]
        # The offer set of all ranked tasks at a floor, shared by every path whose eligible
        # tasks are all of them (the usual case) and that starts on a contract with that floor.
        whole_sets: dict[float, list[bpm.Item]] = {}
        for path in self._paths(i, budget):
            nodes = [e.partner for e in path]
            j = nodes[-1]
            if self.has_replicas:
                held = self.held(j)
                hosting = [e.replicas for e in path]
                eligible = [
                    item
                    for item, task in tasks
                    if not task.chain.intersection(nodes)
                    and task.copy.task not in held
                    and copies.may_travel(task.copy.is_replica, hosting)
                ]
            else:
                # Every task has one copy, hosted here: nobody further holds one, and a primary
                # may travel over any contract.
                held = set()
                eligible = [item for item, task in tasks if not task.chain.intersection(nodes)]
            first = path[0]
            bar = first.price_min + delta
            # ``bpm.offer_list``; empty exactly when ``bpm.offer_set`` is (its first task is the
            # first one worth shedding on its own).
            offer = [item for item in eligible if saving[item[0]] > bar]
            if not offer:
                continue
            if len(eligible) < len(ranked):
                expected = bpm.offer_set(model, load, eligible, first.price_min, delta)
            elif first.price_min in whole_sets:
                expected = whole_sets[first.price_min]
            else:
                expected = bpm.offer_set(model, load, eligible, first.price_min, delta)
                whole_sets[first.price_min] = expected
            giver_res = protocol.giver_reservation(model, load, bpm.set_load(expected), delta)
            # The taker quotes for its first unit: it picks the subset once the price is known,
            # taking only tasks that keep its marginal cost below the price less the band.
            taker_res = protocol.taker_reservation(self.models[j], self.loads[j], 0.0, delta)
            if not offered_any:
                self.offers += 1
                offered_any = True
            prices = protocol.chain_prices(
                giver_res, taker_res, [(e.price_min, e.price_max) for e in path]
            )
            if prices is None:
                continue
            taken = bpm.accept_subset(
                model,
                load,
                self.models[j],
                self.loads[j],
                # The receiver refuses what it may not host, whatever the giver proposed.
                copies.receivable(offer, self._task_of, held) if self.has_replicas else offer,
                give_price=prices[0],
                take_price=prices[-1],
                delta=delta,
            )
            if taken:
                self._carry(i, path, prices, taken, now)
                return {i, *nodes}
        return None

    def _task_of(self, name: str) -> str:
        return self.tasks[self.task_index[name]].copy.task

    def _carry(
        self,
        i: int,
        path: Sequence[_Edge],
        prices: Sequence[float],
        taken: Sequence[bpm.Item],
        now: float,
    ) -> None:
        j = path[-1].partner
        moved = bpm.set_load(taken)
        change = self._cost_change(i, j, moved)
        op = self._next_operation()
        reason = "offer" if len(path) == 1 else "relay"
        removed = added = 0.0
        giver_load, taker_load = self.loads[i], self.loads[j]
        for name, size in taken:
            task = self.tasks[self.task_index[name]]
            giver_mc = marginal_cost(self.models[i], giver_load - removed, -size)
            taker_mc = marginal_cost(self.models[j], taker_load + added, size)
            removed += size
            added += size
            source = i
            for leg, (edge, price) in enumerate(zip(path, prices, strict=True)):
                task.hops.append(
                    _Hop(source, edge.partner, edge.contract, price, now, edge.min_move)
                )
                self.move_log.append(
                    MoveRecord(
                        task.name,
                        self.names[source],
                        self.names[edge.partner],
                        reason,
                        now,
                        price,
                        size,
                        giver_mc if leg == 0 else math.nan,
                        taker_mc if leg == len(path) - 1 else math.nan,
                        change,
                        op,
                    )
                )
                task.chain.add(edge.partner)
                source = edge.partner
            self._relocate(task, i, j)
            self.relocations += 1

    def _relocate(self, task: _Task, src: int, dst: int) -> None:
        k = self.task_index[task.name]
        self._touch(src, dst)
        self.hosted[src].discard(k)
        self.hosted[dst].add(k)
        task.host = dst
        self.loads[src] -= task.load
        self.loads[dst] += task.load
        if not self.hosted[src]:
            self.loads[src] = 0.0  # no drift: an empty participant carries exactly nothing

    def _cost_change(self, giver: int, taker: int, moved: float) -> float:
        g, t = self.models[giver], self.models[taker]
        before = g.cost(self.loads[giver]) + t.cost(self.loads[taker])
        after = g.cost(self.loads[giver] - moved) + t.cost(self.loads[taker] + moved)
        if math.isinf(before):
            return -math.inf if math.isfinite(after) else 0.0
        return after - before

    # --- payments ------------------------------------------------------------------------

    def payment_rates(self) -> dict[tuple[int, int], float]:
        """What each payer owes each payee per second in the current state."""
        rates: dict[tuple[int, int], float] = {}
        for hosted in self.hosted:
            for k in hosted:
                task = self.tasks[k]
                for hop in task.hops:
                    key = (hop.source, hop.target)
                    rates[key] = rates.get(key, 0.0) + bpm.payment(hop.price, task.load, 1.0)
        return rates


def simulate(
    doc: FederationDoc,
    *,
    max_steps: int | None = None,
    max_hops: int | None = DEFAULT_MAX_HOPS,
    record_trace: bool = True,
) -> SimulationResult:
    """Run the Bounded-Price Mechanism over ``doc`` and report what happened.

    ``max_steps`` caps the number of steps (default: the scenario's duration); ``max_hops``
    bounds chained moves (None: forward along any path); ``record_trace=False`` keeps only the
    acceptability series, for sweeps that do not plot.
    """
    spec = doc.simulation
    dt = spec.step_seconds
    steps = max_steps if max_steps is not None else max(1, round(spec.duration_seconds / dt))
    every = max(1, round(spec.offer_interval_seconds / dt))
    fed = _Federation(doc, max_hops)
    names = fed.names

    events: list[tuple[float, int, str, Any]] = []
    for n, p in enumerate(doc.participants):
        if p.joins_at is not None and p.joins_at > 0:
            events.append((float(p.joins_at), n, "join", p.name))
    for n, e in enumerate(doc.timeline):
        events.append((e.at, len(doc.participants) + n, e.event, e))
    events.sort(key=lambda ev: (ev[0], ev[1]))

    trace: list[StepRecord] = []
    acceptable_series: list[bool] = []
    net = [0.0] * len(names)
    ledger: dict[tuple[int, int], float] = {}
    paid_total = 0.0
    rates = fed.payment_rates()
    verdict = fed.judge(explain=False)
    snapshot: tuple[dict[str, float], dict[str, float], float] | None = None
    next_event = 0
    step = 0
    for step in range(steps):
        now = step * dt
        changed = False
        while next_event < len(events) and events[next_event][0] <= now + 1e-9:
            _, _, kind, payload = events[next_event]
            next_event += 1
            changed = True
            if kind == "join":
                who = payload if isinstance(payload, str) else payload.participant
                fed.join(fed.index[who])
            elif kind == "leave":
                fed.leave(fed.index[payload.participant], now)
            elif kind == "scale_load":
                fed.scale_owned(fed.index[payload.participant], float(payload.factor))
            elif kind == "task_load":
                fed.set_task_load(payload.task, float(payload.load))
        moved = 0
        offers_before = fed.offers
        if step % every == 0:
            moved = fed.offer_round(now)
            changed = changed or moved > 0
        if changed or snapshot is None:
            rates = fed.payment_rates()
            verdict = fed.judge(explain=False)
            snapshot = (
                {n: fed.loads[i] if fed.online[i] else 0.0 for i, n in enumerate(names)},
                {
                    n: fed.models[i].derivative(fed.loads[i])
                    for i, n in enumerate(names)
                    if fed.online[i]
                },
                fed.total_cost(),
            )
        acceptable_series.append(verdict.acceptable)
        if record_trace:
            trace.append(
                StepRecord(
                    t=now,
                    loads=snapshot[0],
                    marginal_costs=snapshot[1],
                    acceptable=verdict.acceptable,
                    overloaded=verdict.overloaded,
                    cost=snapshot[2],
                    offers=fed.offers - offers_before,
                    moves=moved,
                )
            )
        # Payments for [now, now + dt) at the state just reached.
        for (payer, payee), rate in rates.items():
            amount = rate * dt
            net[payer] -= amount
            net[payee] += amount
            ledger[(payer, payee)] = ledger.get((payer, payee), 0.0) + amount
            paid_total += amount
        quiet = (
            step % every == 0
            and moved == 0
            and next_event >= len(events)
            and not fed.pending_timers(now)
        )
        if quiet:
            remaining = (steps - step - 1) * dt
            for (payer, payee), rate in rates.items():
                amount = rate * remaining
                net[payer] -= amount
                net[payee] += amount
                ledger[(payer, payee)] = ledger.get((payer, payee), 0.0) + amount
                paid_total += amount
            break

    verdict = fed.judge(explain=True)  # the state the last step judged, now with its reasons
    recorded = len(acceptable_series)
    steps_to = None
    if acceptable_series and acceptable_series[-1]:
        start = recorded - 1
        while start > 0 and acceptable_series[start - 1]:
            start -= 1
        steps_to = start
    online_models = {n: fed.models[i] for i, n in enumerate(names) if fed.online[i]}
    online_loads = {n: fed.loads[fed.index[n]] for n in online_models}
    bound = cost_lower_bound(online_models, online_loads, fed.contract_pairs)
    cost = fed.total_cost()
    return SimulationResult(
        acceptable=verdict.acceptable,
        steps_to_acceptable=steps_to,
        seconds_to_acceptable=steps_to * dt if steps_to is not None else None,
        moves=fed.relocations,
        payments_total=paid_total,
        cost=cost,
        cost_lower_bound=bound,
        final_load={n: fed.loads[i] if fed.online[i] else 0.0 for i, n in enumerate(names)},
        thresholds={n: fed.thresholds[i] for i, n in enumerate(names)},
        trace=trace,
        move_log=fed.move_log,
        net_payments={n: net[i] for i, n in enumerate(names)},
        ledger={f"{names[a]}->{names[b]}": v for (a, b), v in sorted(ledger.items())},
        overloaded=verdict.overloaded,
        offers=fed.offers,
        steps=recorded,
        reasons=verdict.reasons,
        copy_of={t.name: t.copy.task for t in fed.tasks},
        initial_hosts=fed.initial_hosts,
        final_hosts=fed.host_names(),
        unplaced_replicas=tuple(t.name for t in fed.tasks if not t.placed),
        verdict=verdict_line(verdict, fed.positions()),
        cost_note=None if math.isfinite(cost) else _infinite_cost_note(online_models, online_loads),
        cost_lower_bound_note=(
            None
            if math.isfinite(bound)
            else _infinite_bound_note(online_models, online_loads, fed.contract_pairs)
        ),
        initial_load=fed.initial_loads,
        horizon_seconds=steps * dt,
    )


def verdict_line(verdict: Acceptability, positions: Sequence[Position] = ()) -> str:
    """The verdict in one line: the rule's summary, or its first reason and how many follow.

    An overloaded federation is acceptable when nobody has room for a task; a participant below
    its threshold without room for one (the rule judges at task granularity) is named, so the
    line does not claim everyone is at or above the threshold."""
    if verdict.acceptable and verdict.overloaded:
        below = [p.name for p in positions if p.load < p.threshold]
        if below:
            return (
                f"acceptable: the federation is overloaded ({verdict.total_load:.1f} > "
                f"{verdict.total_threshold:.1f}) and nobody has room for a task: "
                f"{_listing(below)} {'is' if len(below) == 1 else 'are'} below the threshold "
                "without room for another task, everyone else at or above it"
            )
    if verdict.acceptable or not verdict.reasons:
        return verdict.summary
    more = len(verdict.offenders) - 1
    tail = f" (and {more} more participant{'s' if more > 1 else ''})" if more > 0 else ""
    return f"not acceptable: {verdict.reasons[0]}{tail}"


def _listing(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _infinite_cost_note(models: dict[str, CostModel], loads: dict[str, float]) -> str:
    """Who makes the total cost infinite: participants at or past capacity (M/M/1: D(u) =
    u / (1 - u) has no finite value for u >= 1)."""
    past = [
        f"{n} ({loads[n]:.1f} of capacity {models[n].capacity:.1f})"
        for n in models
        if not math.isfinite(models[n].cost(loads[n]))
    ]
    verb = "is" if len(past) == 1 else "are"
    return (
        f"infinite: {_listing(past)} {verb} at or past capacity, where the cost model has no "
        "finite value"
    )


def _infinite_bound_note(
    models: dict[str, CostModel], loads: dict[str, float], pairs: Sequence[tuple[str, str]]
) -> str:
    """Why even the best allocation costs infinity: a part of the contract graph carries more
    load than the capacity of all its participants together (no moves can fix that)."""
    full = []
    for group in components(sorted(models), pairs):
        if math.isinf(
            component_bound([models[n] for n in group], math.fsum(loads[n] for n in group))
        ):
            load = math.fsum(loads[n] for n in group)
            capacity = math.fsum(models[n].capacity for n in group)
            full.append(
                f"{{{_listing(group, 4)}}} carries {load:.1f} against a capacity of {capacity:.1f}"
            )
    if not full:
        return "infinite: no allocation over the contracts has a finite cost"
    return (
        "infinite: no allocation over the contracts fits: "
        + "; ".join(full[:3])
        + (f"; and {len(full) - 3} more groups" if len(full) > 3 else "")
    )
