"""Random federations for what-if sweeps: deterministic for a seed, connected, priced at thresholds.

A generated federation is an ordinary ``FederationDoc``, so a sweep runs exactly the code path a
contract file does. Parameters follow the Borealis evaluation (Balazinska et al., NSDI 2004, §6):
contracts per participant, price-range width and load skew decide whether BPM reaches an
acceptable allocation.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from app.federation.document import (
    AvailabilitySpec,
    ContractSpec,
    FederationDoc,
    ParticipantSpec,
    SimulationSpec,
    TaskSpec,
)
from app.market.cost_models import MM1Cost, threshold_for_price

# Contract prices are centred on the marginal cost at this utilisation, so each participant's
# capacity threshold sits near it (Borealis's demo runs its nodes to about 80%).
THRESHOLD_UTILISATION = 0.8
BASE_CAPACITY = 100.0
# No generated task exceeds this fraction of the smallest capacity threshold in the federation.
# A stream-processing task that no participant could host below its threshold (the skew can
# give one participant several times its capacity, and a few tasks per participant then make
# single tasks larger than any threshold) is not a load-management problem but an unrunnable
# query; the bench's failures at large k were such tasks. Larger parts are split evenly.
MAX_TASK_FRACTION = 0.5


def _check(name: str, ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"generate_federation: {name} {what}")


def _contract_graph(n: int, k: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """A random tree (so the graph is connected) topped up until every node has k partners."""
    edges: set[tuple[int, int]] = set()
    degree = [0] * n
    order = rng.permutation(n)
    for pos in range(1, n):
        a, b = int(order[pos]), int(order[rng.integers(0, pos)])
        edges.add((min(a, b), max(a, b)))
        degree[a] += 1
        degree[b] += 1
    target = min(k, n - 1)
    for a in range(n):
        # Candidates are drawn without replacement, so the loop ends even on a dense graph.
        for b in rng.permutation(n):
            if degree[a] >= target:
                break
            b = int(b)
            edge = (min(a, b), max(a, b))
            if b == a or edge in edges:
                continue
            edges.add(edge)
            degree[a] += 1
            degree[b] += 1
    return sorted(edges)


def generate_federation(
    *,
    participants: int,
    contracts_per_participant: int,
    price_range_width: float,
    load_skew: float,
    capacity_spread: float,
    seed: int,
    tasks_per_participant: int = 10,
    overload: float = 0.6,
    min_move_seconds: float = 30.0,
    hysteresis_fraction: float = 0.02,
    duration_seconds: float = 3600.0,
    common_price: bool = False,
    replica_share: float = 0.0,
    replicas_per_task: int = 1,
    replica_hosting_share: float = 0.0,
) -> FederationDoc:
    """A connected random federation of M/M/1 participants.

    - ``contracts_per_participant`` (k): every participant has at least k contracts (k = 1 gives
      a random spanning tree, the sparsest connected graph).
    - ``price_range_width``: each contract's range is its centre +/- width/2, as a fraction of
      the centre (0 = fixed price, 0.2 = 20%). The centre is the mean of the two parties'
      marginal costs at ``THRESHOLD_UTILISATION``, so thresholds sit near 80% utilisation.
    - ``load_skew``: 0 spreads load in proportion to capacity; larger values concentrate it
      (log-normal weights with this sigma).
    - ``capacity_spread``: capacities are 100 * (1 + spread) ** U(-1, 1).
    - ``tasks_per_participant``: each participant's load is split into this many tasks
      (Dirichlet shares); a share above ``MAX_TASK_FRACTION`` of the smallest threshold is split
      evenly into more tasks, so this is a minimum.
    - ``overload``: total offered load as a fraction of the total threshold load; below 1 the
      federation is underloaded, above 1 overloaded.
    - ``common_price``: centre every contract on one price, the median of the participants'
      threshold marginal costs, so every participant's threshold sits exactly at its contracts'
      price (at different utilisations when capacities differ).
    - ``replica_share``: the fraction of tasks that ask for ``replicas_per_task`` replicas;
      ``replica_hosting_share``: the fraction of contracts whose availability terms allow replica
      hosting. Both are drawn from their own random stream, so with the defaults (no replicas)
      a seed gives the same federation as before replicas existed.
    """
    _check("participants", participants >= 2, f"must be at least 2, got {participants}")
    _check(
        "contracts_per_participant",
        contracts_per_participant >= 1,
        f"must be at least 1, got {contracts_per_participant}",
    )
    _check(
        "price_range_width",
        0.0 <= price_range_width < 2.0,
        f"must be in [0, 2), got {price_range_width}",
    )
    _check("load_skew", load_skew >= 0.0, f"must be non-negative, got {load_skew}")
    _check(
        "capacity_spread", capacity_spread >= 0.0, f"must be non-negative, got {capacity_spread}"
    )
    _check(
        "tasks_per_participant",
        tasks_per_participant >= 1,
        f"must be at least 1, got {tasks_per_participant}",
    )
    _check("overload", overload > 0.0, f"must be positive, got {overload}")
    for name, share in (
        ("replica_share", replica_share),
        ("replica_hosting_share", replica_hosting_share),
    ):
        _check(name, 0.0 <= share <= 1.0, f"must be in [0, 1], got {share}")
    _check(
        "replicas_per_task", replicas_per_task >= 1, f"must be at least 1, got {replicas_per_task}"
    )

    rng = np.random.default_rng(seed)
    width = len(str(participants - 1))
    names = [f"P{i:0{width}d}" for i in range(participants)]
    capacities = BASE_CAPACITY * (1.0 + capacity_spread) ** rng.uniform(-1.0, 1.0, participants)
    models = [MM1Cost(capacity=float(c)) for c in capacities]
    threshold_mc = [m.derivative(THRESHOLD_UTILISATION * m.capacity) for m in models]

    median_mc = float(np.median(threshold_mc))
    contracts: list[ContractSpec] = []
    for a, b in _contract_graph(participants, contracts_per_participant, rng):
        centre = median_mc if common_price else (threshold_mc[a] + threshold_mc[b]) / 2.0
        half = centre * price_range_width / 2.0
        contracts.append(
            ContractSpec(
                a=names[a],
                b=names[b],
                price_min=round(centre - half, 9),
                price_max=round(centre + half, 9),
                min_move_seconds=min_move_seconds,
            )
        )

    if common_price:
        thresholds = np.array([threshold_for_price(m, median_mc) for m in models])
    else:
        thresholds = np.array([THRESHOLD_UTILISATION * c for c in capacities])
    weights = capacities * np.exp(load_skew * rng.standard_normal(participants))
    total = overload * float(thresholds.sum())
    loads = total * weights / weights.sum()
    smallest_threshold = float(thresholds.min())
    largest_task = MAX_TASK_FRACTION * smallest_threshold if smallest_threshold > 0 else math.inf
    tasks: list[TaskSpec] = []
    for i, name in enumerate(names):
        parts = rng.dirichlet(np.full(tasks_per_participant, 4.0)) * loads[i]
        sizes = [
            float(part) / pieces
            for part in parts
            for pieces in [max(1, math.ceil(float(part) / largest_task))]
            for _ in range(pieces)
        ]
        for j, size in enumerate(sizes):
            tasks.append(TaskSpec(name=f"{name}.t{j:02d}", owner=name, load=size))

    if replica_share > 0.0 or replica_hosting_share > 0.0:
        extra = np.random.default_rng([seed, 1])
        hosting = AvailabilitySpec(replica_hosting=True)
        contracts = [
            dataclasses.replace(c, availability=hosting)
            if extra.random() < replica_hosting_share
            else c
            for c in contracts
        ]
        tasks = [
            dataclasses.replace(t, replicas=replicas_per_task)
            if extra.random() < replica_share
            else t
            for t in tasks
        ]

    participants_specs = tuple(
        ParticipantSpec(name=names[i], capacity=float(capacities[i]), cost_model={"kind": "mm1"})
        for i in range(participants)
    )
    min_price = min(c.price_min for c in contracts) if contracts else 1.0
    hysteresis = hysteresis_fraction * min_price
    return FederationDoc(
        name=f"generated-n{participants}-k{contracts_per_participant}-s{seed}",
        description=(
            f"generated: participants={participants} k={contracts_per_participant} "
            f"width={price_range_width} skew={load_skew} spread={capacity_spread} "
            f"overload={overload} seed={seed}"
        ),
        participants=participants_specs,
        contracts=tuple(contracts),
        tasks=tuple(tasks),
        timeline=(),
        simulation=SimulationSpec(
            step_seconds=1.0,
            offer_interval_seconds=7.0,
            duration_seconds=duration_seconds,
            hysteresis=hysteresis if math.isfinite(hysteresis) else 0.0,
        ),
        source="<generated>",
    )
