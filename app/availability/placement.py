"""Placing k replicas of a task as priced load (DESIGN.md, "Availability"; issue 5, item 1).

A replica runs the same fragment on the same input, so it costs its host what the task costs:
its load counts like any other load and the owner pays for it under the contract, at the
contract's price per unit load per second. Candidates are the owner's partners whose contract
allows replica hosting; never two replicas (nor a replica and the primary) on one participant,
since one crash would take both. Among candidates the cheapest contract goes first, then the
one left least utilised; a host whose utilisation would reach 1 is refused (its cost would be
unbounded, so it would shed the replica at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class PlacementError(ValueError):
    """Not enough eligible hosts; says which were excluded and why."""


@dataclass(frozen=True)
class ReplicaCandidate:
    participant: str
    hosts_replicas: bool
    load: float
    capacity: float
    # The owner's contract price with this partner, per unit load per second.
    price: float


@dataclass(frozen=True)
class ReplicaPlacement:
    task: str
    hosts: tuple[str, ...]
    # New load per chosen host, and what the owner pays each per second.
    loads: dict[str, float]
    payments_per_second: dict[str, float]


def place_replicas(
    task: str,
    *,
    task_load: float,
    k: int,
    primary_host: str,
    candidates: Sequence[ReplicaCandidate],
    existing: Sequence[str] = (),
) -> ReplicaPlacement:
    """Choose hosts for the replicas still missing so that the task has ``k`` in total."""
    if k < 0:
        raise PlacementError(f"task {task}: k must be >= 0, got {k}")
    if task_load < 0:
        raise PlacementError(f"task {task}: task_load must be >= 0, got {task_load}")
    names = [c.participant for c in candidates]
    if len(set(names)) != len(names):
        raise PlacementError(f"task {task}: candidates listed twice: {sorted(names)}")
    taken = {primary_host, *existing}
    missing = k - len(existing)
    why: dict[str, str] = {}
    eligible: list[ReplicaCandidate] = []
    for c in candidates:
        if c.participant in taken:
            why[c.participant] = "already hosts this task or a replica of it"
        elif not c.hosts_replicas:
            why[c.participant] = "its contract does not allow replica hosting"
        elif c.capacity <= 0 or (c.load + task_load) / c.capacity >= 1:
            why[c.participant] = "no capacity left for the replica's load"
        else:
            eligible.append(c)
    if missing > len(eligible):
        excluded = ", ".join(f"{p}: {r}" for p, r in sorted(why.items())) or "none"
        raise PlacementError(
            f"task {task}: needs {missing} more replica host(s), only {len(eligible)} eligible "
            f"(excluded: {excluded})"
        )
    eligible.sort(key=lambda c: (c.price, (c.load + task_load) / c.capacity, c.participant))
    chosen = eligible[: max(missing, 0)]
    return ReplicaPlacement(
        task=task,
        hosts=tuple(c.participant for c in chosen),
        loads={c.participant: c.load + task_load for c in chosen},
        payments_per_second={c.participant: task_load * c.price for c in chosen},
    )
