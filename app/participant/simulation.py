"""The what-if simulation composed of participant nodes: one ``Agent`` per participant over the
in-memory registry, on a simulated clock (DESIGN.md "A participant is a process": the
simulator composes the same participant node; no driver re-implements the participant).

``simulate_nodes(doc)`` plays the federation's timeline as ``app.market.simulator.simulate``
does and returns the same ``SimulationResult``, so the two paths compare field for field:

- time advances in steps of ``simulation.step_seconds``; at each step the timeline events due
  by then are applied to the registry (``scale_load`` scales the loads a participant owns,
  ``task_load`` sets one, ``join`` and ``leave`` change who is online; a participant's
  ``joins_at`` is a join), then every online node ticks once (its statistics interval), in name
  order, with ``offer_interval_seconds`` as its offer interval;
- a node decides with ``BpmDecisions.for_participant`` and hosts nothing (``NoHost``): every
  task is declared load, and its mover commits an accepted movement at once (``CommitMover``);
- after the nodes' ticks the allocation is judged with ``acceptability.judge_allocation`` on the
  registry's loads, with the simulator's thresholds and threshold prices;
- payments are the registry's ledger, brought up to the end of the duration.

Like the simulator, the run stops early once nothing can change any more (no event pending, no
registry write for a few offer intervals, no task inside its minimum move duration), and the
payments run on to the end of the duration. Replicas are not modelled by the memory registry:
a federation asking for them runs without them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from app.federation.document import FederationDoc
from app.market import bpm
from app.market.acceptability import Acceptability, Link, Position, judge_allocation
from app.market.cost_models import CostModel, build_cost_model
from app.market.lower_bound import cost_lower_bound
from app.market.simulator import MoveRecord, SimulationResult, StepRecord
from app.participant.bpm_decisions import BpmDecisions
from app.participant.memory_registry import MemoryRegistry, ParticipantView
from app.participant.node import Agent, MoveEvent
from app.participant.ports import MovementRecord, NoHost, Received

# Where simulated time 0 sits on the registry's clock (any instant would do).
SIM_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class SimClock:
    """Simulated time: ``seconds`` since ``start``; calling it gives the instant, in UTC."""

    def __init__(self, start: datetime = SIM_EPOCH) -> None:
        self.start = start
        self.seconds = 0.0

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds)

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)


@dataclass(frozen=True)
class CommitMover:
    """The mover of a declared-load participant: nothing to ship, so the new host commits the
    movement as soon as it accepted (the registry then names it the host)."""

    registry: ParticipantView

    def receive(self, movement: MovementRecord) -> Received:
        self.registry.commit(movement.id, movement.epoch)
        return Received()

    def receive_replica(self, movement: MovementRecord) -> Received:
        self.registry.abort(movement.id)
        raise RuntimeError("the memory registry holds no replicas")


def registry_for(doc: FederationDoc, clock: Callable[[], datetime]) -> MemoryRegistry:
    """The registry a federation document describes at time 0: participants (those joining
    later offline), contracts, and every task at its initial host."""
    registry = MemoryRegistry(clock)
    for p in doc.participants:
        registry.add_participant(p.name, online=not (p.joins_at is not None and p.joins_at > 0))
    for c in doc.contracts:
        hosting = c.availability is not None and c.availability.replica_hosting
        registry.add_contract(
            c.a, c.b, c.price_min, c.price_max, c.min_move_seconds, replica_hosting=hosting
        )
    for t in doc.tasks:
        registry.add_task(
            t.name,
            t.owner,
            t.load,
            host=t.initial_host,
            fragment=t.fragment,
            params=dict(t.params),
            inputs=t.inputs,
        )
    return registry


class _Judge:
    """The simulator's acceptability inputs over the registry's state."""

    def __init__(self, doc: FederationDoc) -> None:
        self.models: dict[str, CostModel] = {
            p.name: build_cost_model(p.cost_model, p.capacity) for p in doc.participants
        }
        self.delta = doc.simulation.hysteresis
        self.links = [Link(c.a, c.b, c.price_min, c.price_max) for c in doc.contracts]
        self.ranges: dict[str, list[tuple[str, float, float]]] = {n: [] for n in self.models}
        for c in doc.contracts:
            self.ranges[c.a].append((c.b, c.price_min, c.price_max))
            self.ranges[c.b].append((c.a, c.price_min, c.price_max))
        self.pairs = [(c.a, c.b) for c in doc.contracts]

    def thresholds(self, online: dict[str, bool]) -> tuple[dict[str, float], dict[str, float]]:
        """Each participant's threshold and threshold price, over its contracts with online
        partners (all of them when none is online), as ``_Federation._rebuild``."""
        thresholds, prices = {}, {}
        for name, model in self.models.items():
            mine = self.ranges[name]
            ranges = [(lo, hi) for p, lo, hi in mine if online.get(p, False)] or [
                (lo, hi) for _, lo, hi in mine
            ]
            price = bpm.threshold_price(ranges)
            prices[name] = price if price is not None else model.derivative(model.capacity)
            thresholds[name] = bpm.capacity_threshold(model, ranges)
        return thresholds, prices

    def judge(self, registry: MemoryRegistry, *, explain: bool) -> Acceptability:
        thresholds, prices = self.thresholds(registry.online)
        positions = []
        for name in self.models:
            if not registry.online.get(name, False):
                continue
            sizes = [s for s in registry.hosted(name).values() if s > 0]
            positions.append(
                Position(
                    name=name,
                    load=math.fsum(sizes),
                    threshold=thresholds[name],
                    smallest_task=min(sizes) if sizes else None,
                    model=self.models[name],
                    price=prices[name],
                )
            )
        return judge_allocation(positions, self.links, delta=self.delta, explain=explain)

    def cost(self, loads: dict[str, float]) -> float:
        return math.fsum(self.models[n].cost(load) for n, load in loads.items())


def _events(doc: FederationDoc) -> list[tuple[float, int, str, Any]]:
    events: list[tuple[float, int, str, Any]] = []
    for n, p in enumerate(doc.participants):
        if p.joins_at is not None and p.joins_at > 0:
            events.append((float(p.joins_at), n, "join", p.name))
    for n, e in enumerate(doc.timeline):
        events.append((e.at, len(doc.participants) + n, e.event, e))
    events.sort(key=lambda ev: (ev[0], ev[1]))
    return events


def simulate_nodes(
    doc: FederationDoc,
    *,
    max_steps: int | None = None,
    record_trace: bool = True,
    stop_when_quiet: bool = True,
    refusal_backoff_intervals: int = 3,
) -> SimulationResult:
    """Run one participant node per participant over the memory registry; see the module doc.

    ``max_steps`` caps the number of steps (default: the scenario's duration);
    ``record_trace=False`` keeps only the acceptability series; ``stop_when_quiet=False`` runs
    every step even when nothing can change any more.
    """
    spec = doc.simulation
    dt = spec.step_seconds
    steps = max_steps if max_steps is not None else max(1, round(spec.duration_seconds / dt))
    clock = SimClock()
    registry = registry_for(doc, clock)
    judge = _Judge(doc)
    names = [p.name for p in doc.participants]
    moves: list[MoveRecord] = []

    def recorder(reason_of: dict[str, str]) -> Callable[[MoveEvent], None]:
        def on_move(event: MoveEvent) -> None:
            moves.append(
                MoveRecord(
                    event.task,
                    event.src,
                    event.dst,
                    reason_of.get(event.reason, event.reason),
                    event.at,
                    event.price if event.price is not None else math.nan,
                    registry.tasks[event.task].load,
                )
            )

        return on_move

    on_move = recorder({"load": "offer"})
    agents: dict[str, Agent] = {}
    for p in doc.participants:
        view = registry.client_for(p.name)
        agents[p.name] = Agent(
            p.name,
            view,
            BpmDecisions.for_participant(p, spec.hysteresis),
            NoHost(),
            CommitMover(view),
            offer_interval=spec.offer_interval_seconds,
            refusal_backoff_intervals=refusal_backoff_intervals,
            on_move=on_move,
            clock=clock,
        )
    partners: dict[str, set[str]] = {n: set() for n in names}
    for c in doc.contracts:
        partners[c.a].add(c.b)
        partners[c.b].add(c.a)
    min_moves = {c.id: c.min_move_seconds for c in registry.contracts.values()}
    quiet_window = spec.offer_interval_seconds * (refusal_backoff_intervals + 2)

    events = _events(doc)
    trace: list[StepRecord] = []
    series: list[bool] = []
    verdict: Acceptability | None = None
    snapshot: tuple[dict[str, float], dict[str, float], float] | None = None
    seen_writes = -1
    last_write_at = 0.0
    next_event = 0
    for step in range(steps):
        now = step * dt
        clock.seconds = now
        while next_event < len(events) and events[next_event][0] <= now + 1e-9:
            _, _, kind, payload = events[next_event]
            next_event += 1
            if kind == "join":
                who = payload if isinstance(payload, str) else payload.participant
                registry.join(who)
            elif kind == "leave":
                for m in registry.leave(payload.participant):
                    load = registry.tasks[m.task].load
                    moves.append(MoveRecord(m.task, m.src, m.to, "leave", now, 0.0, load))
            elif kind == "scale_load":
                for task in list(registry.tasks.values()):
                    if task.owner == payload.participant:
                        registry.set_task_load(task.name, task.load * float(payload.factor))
            elif kind == "task_load":
                registry.set_task_load(payload.task, float(payload.load))
        moved_before = len(moves)
        offers_before = len(registry.offers)
        for name in names:
            if not registry.online.get(name, False):
                continue
            liveness = {
                p: "online" if registry.online.get(p, False) else "offline" for p in partners[name]
            }
            agents[name].tick(now, liveness=liveness)
        if registry.writes != seen_writes or verdict is None:
            if registry.writes != seen_writes:
                last_write_at = now
            seen_writes = registry.writes
            verdict = judge.judge(registry, explain=False)
            loads = registry.loads()
            snapshot = (
                {n: loads.get(n, 0.0) for n in names},
                {n: judge.models[n].derivative(load) for n, load in loads.items()},
                judge.cost(loads),
            )
        assert snapshot is not None
        series.append(verdict.acceptable)
        if record_trace:
            trace.append(
                StepRecord(
                    t=now,
                    loads=snapshot[0],
                    marginal_costs=snapshot[1],
                    acceptable=verdict.acceptable,
                    overloaded=verdict.overloaded,
                    cost=snapshot[2],
                    offers=len(registry.offers) - offers_before,
                    moves=len(moves) - moved_before,
                )
            )
        if stop_when_quiet and next_event >= len(events) and now - last_write_at >= quiet_window:
            timers = any(
                t.price is not None
                and (clock() - t.host_since).total_seconds()
                < min_moves.get(t.contract_id or -1, 0.0) + spec.offer_interval_seconds
                for t in registry.tasks.values()
            )
            if not timers:
                break

    registry.accrue_all(clock.at(steps * dt))
    verdict = judge.judge(registry, explain=True)
    steps_to = None
    if series and series[-1]:
        start = len(series) - 1
        while start > 0 and series[start - 1]:
            start -= 1
        steps_to = start
    loads = registry.loads()
    thresholds, _ = judge.thresholds(registry.online)
    online_models = {n: judge.models[n] for n in loads}
    return SimulationResult(
        acceptable=verdict.acceptable,
        steps_to_acceptable=steps_to,
        seconds_to_acceptable=steps_to * dt if steps_to is not None else None,
        moves=len(moves),
        payments_total=registry.paid_total(),
        cost=judge.cost(loads),
        cost_lower_bound=cost_lower_bound(online_models, loads, judge.pairs),
        final_load={n: loads.get(n, 0.0) for n in names},
        thresholds=thresholds,
        trace=trace,
        move_log=moves,
        net_payments=registry.balances(),
        ledger=registry.ledger_by_pair(),
        overloaded=verdict.overloaded,
        offers=len(registry.offers),
        steps=len(series),
        reasons=verdict.reasons,
        copy_of={t: t for t in registry.tasks},
        initial_hosts={t.name: t.initial_host for t in doc.tasks},
        final_hosts={t.name: t.host for t in registry.tasks.values()},
    )


@dataclass(frozen=True)
class Act:
    """The span between two timeline events (the first from 0, the last to the duration) and
    the verdict in it: acceptable at its end, and how long after its start the allocation
    became acceptable for good (None: not by the end of the act)."""

    start: float
    end: float
    acceptable: bool
    seconds_to_acceptable: float | None


def acts(doc: FederationDoc, result: SimulationResult) -> list[Act]:
    """Per act of ``doc``'s timeline, the verdicts in ``result``'s trace (a trace that stopped
    early holds its last state to the end)."""
    cuts = sorted(
        {e.at for e in doc.timeline}
        | {float(p.joins_at) for p in doc.participants if p.joins_at is not None and p.joins_at > 0}
    )
    bounds = [0.0, *(c for c in cuts if 0 < c < doc.simulation.duration_seconds)]
    ends = [*bounds[1:], doc.simulation.duration_seconds]
    out = []
    for start, end in zip(bounds, ends, strict=True):
        inside = [r for r in result.trace if start - 1e-9 <= r.t < end - 1e-9]
        if not inside:
            before = [r for r in result.trace if r.t < start]
            ok = bool(before) and before[-1].acceptable
            out.append(Act(start, end, ok, 0.0 if ok else None))
            continue
        ok = inside[-1].acceptable
        since = None
        if ok:
            k = len(inside) - 1
            while k > 0 and inside[k - 1].acceptable:
                k -= 1
            since = inside[k].t - start
        out.append(Act(start, end, ok, since))
    return out
