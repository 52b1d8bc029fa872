"""A deterministic, single-threaded DPC run: sources, k replicas of one fragment, a consumer.

Used by the property tests (any schedule of link failures and heals ends with the failure-free
stable output) and by the benchmark (added latency, tentative rows per delay strategy,
reconciliation time). Time advances in ticks of ``tick_ms``; stime and the clock share one scale.

Links: ``"<source>-><replica>"`` carries a source's rows to one replica; ``"<replica>->out"``
carries a replica's output to the consumer; a bare source name cuts that source from every
replica. A cut link delivers nothing; the rows wait in the producer's log (upstream backup) and
flow after the heal. The consumer's failure detection is immediate here (the real runtime uses
``FailureDetector``); it picks replicas with ``UpstreamSelector`` and resynchronises by key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.availability.node import DPCNode
from app.availability.operators import Operator
from app.availability.outputlog import OutputLog, StreamView
from app.availability.permission import ReconciliationPermits
from app.availability.states import NodeState
from app.availability.sunion import DelayStrategy
from app.availability.tuples import Key, Message, Row
from app.availability.upstream import ReplicaView, Switch, UpstreamSelector


@dataclass(frozen=True)
class Outage:
    link: str
    start: int
    end: int

    def covers(self, now: int) -> bool:
        return self.start <= now < self.end


def source_rows(name: str, *, rate_per_second: int, duration_ms: int, keys: int) -> list[Row]:
    """A deterministic stream: row i at stime i * 1000 / rate, a key and a small value."""
    count = duration_ms * rate_per_second // 1000
    return [
        Row(i * 1000 // rate_per_second, f"{name}{i:07d}", (f"k{(i * 7919) % keys}", i * 31 % 10))
        for i in range(count)
    ]


@dataclass
class SimResult:
    view: StreamView
    switches: list[Switch]
    tentative_rows: int
    corrections: int
    # Per replica: [(start, end)] of each STABILIZATION period.
    stabilizations: dict[str, list[tuple[int, int]]]
    max_concurrent_stabilizing: int
    ended_at: int
    states: dict[str, NodeState] = field(default_factory=dict)

    @property
    def stable(self) -> list[Row]:
        return self.view.stable


def simulate(
    *,
    sources: dict[str, list[Row]],
    make_operator: Callable[[], Operator],
    bucket_ms: int,
    delay_budget_ms: int,
    strategy: DelayStrategy = DelayStrategy.DELAY_EACH,
    replicas: Sequence[str] = ("N",),
    outages: Sequence[Outage] = (),
    tick_ms: int = 50,
    replay_per_tick: int | None = None,
    settle_ms: int | None = None,
) -> SimResult:
    last_row = max((r.stime for rows in sources.values() for r in rows), default=0)
    last_outage = max((o.end for o in outages), default=0)
    settle = settle_ms if settle_ms is not None else 4 * (bucket_ms + delay_budget_ms)
    end = max(last_row, last_outage) + settle
    permits = ReconciliationPermits()
    nodes = {
        name: DPCNode(
            name,
            list(sources),
            make_operator(),
            bucket_ms=bucket_ms,
            delay_budget_ms=delay_budget_ms,
            strategy=strategy,
            request_permission=lambda n: permits.request("fragment", n),
            release_permission=lambda n: permits.release("fragment", n),
            replay_per_tick=replay_per_tick,
        )
        for name in replicas
    }
    logs = {name: OutputLog() for name in replicas}
    delivered = {(s, r): 0 for s in sources for r in replicas}
    selector = UpstreamSelector("out", tuple(replicas))
    view = StreamView()
    position = 0
    stabilizing_since: dict[str, int] = {}
    periods: dict[str, list[tuple[int, int]]] = {r: [] for r in replicas}
    max_concurrent = 0

    def down(link: str, now: int) -> bool:
        return any(o.link == link and o.covers(now) for o in outages)

    now = 0
    while now <= end:
        for source, rows in sources.items():
            for replica, node in nodes.items():
                if down(source, now) or down(f"{source}->{replica}", now):
                    continue
                sent = delivered[(source, replica)]
                while sent < len(rows) and rows[sent].stime < now:
                    node.receive(source, Message.stable(rows[sent]))
                    sent += 1
                delivered[(source, replica)] = sent
                node.receive(source, Message.boundary(now))
        for replica, node in nodes.items():
            logs[replica].append(node.tick(now))
            if node.state is NodeState.STABILIZATION:
                stabilizing_since.setdefault(replica, now)
            elif replica in stabilizing_since:
                periods[replica].append((stabilizing_since.pop(replica), now))
        max_concurrent = max(max_concurrent, len(stabilizing_since))
        views = [ReplicaView(r, nodes[r].state, not down(f"{r}->out", now)) for r in replicas]
        switch = selector.decide(views, now)
        if switch is not None:
            view.switch()
            messages, position = logs[switch.to_replica].resync(view.last_key)
            for message in messages:
                view.apply(message, now)
        elif selector.current is not None and not down(f"{selector.current}->out", now):
            messages, position = logs[selector.current].read(position, after=view.last_key)
            for message in messages:
                view.apply(message, now)
        now += tick_ms
    return SimResult(
        view=view,
        switches=list(selector.switches),
        tentative_rows=view.tentative_total,
        corrections=view.corrections,
        stabilizations=periods,
        max_concurrent_stabilizing=max_concurrent,
        ended_at=now,
        states={r: n.state for r, n in nodes.items()},
    )


def added_latency_ms(result: SimResult, reference: SimResult) -> dict[Key, float]:
    """Per output row: when it was first seen (stable or tentative) minus in the reference."""
    return {
        key: result.view.first_seen[key] - seen
        for key, seen in reference.view.first_seen.items()
        if key in result.view.first_seen
    }
