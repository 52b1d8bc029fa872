"""Generated federations: connected, deterministic, priced at thresholds, underloaded by default."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.market.cost_models import MM1Cost, threshold_for_price
from app.market.generate import MAX_TASK_FRACTION, THRESHOLD_UTILISATION, generate_federation
from app.market.lower_bound import components


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 40),
    k=st.integers(1, 8),
    seed=st.integers(0, 10_000),
    spread=st.floats(0.0, 1.0),
    skew=st.floats(0.0, 2.0),
)
def test_graph_is_connected_and_every_participant_has_k_contracts(n, k, seed, spread, skew):
    doc = generate_federation(
        participants=n,
        contracts_per_participant=k,
        price_range_width=0.1,
        load_skew=skew,
        capacity_spread=spread,
        seed=seed,
    )
    names = [p.name for p in doc.participants]
    assert len(components(names, [(c.a, c.b) for c in doc.contracts])) == 1
    degree = {name: 0 for name in names}
    for c in doc.contracts:
        degree[c.a] += 1
        degree[c.b] += 1
    assert min(degree.values()) >= min(k, n - 1)
    total_capacity = sum(p.capacity for p in doc.participants)
    assert sum(t.load for t in doc.tasks) < total_capacity


def test_same_seed_same_federation_and_another_seed_differs() -> None:
    kw = dict(
        participants=10,
        contracts_per_participant=3,
        price_range_width=0.1,
        load_skew=1.0,
        capacity_spread=0.5,
    )
    assert generate_federation(seed=3, **kw) == generate_federation(seed=3, **kw)
    assert generate_federation(seed=3, **kw) != generate_federation(seed=4, **kw)


def test_prices_are_centred_on_the_parties_threshold_marginal_costs() -> None:
    doc = generate_federation(
        participants=6,
        contracts_per_participant=2,
        price_range_width=0.2,
        load_skew=0.0,
        capacity_spread=0.5,
        seed=1,
    )
    caps = {p.name: p.capacity for p in doc.participants}
    for c in doc.contracts:
        mcs = [MM1Cost(caps[x]).derivative(THRESHOLD_UTILISATION * caps[x]) for x in (c.a, c.b)]
        centre = sum(mcs) / 2
        assert (c.price_min + c.price_max) / 2 == pytest.approx(centre, rel=1e-6)
        assert c.price_max - c.price_min == pytest.approx(0.2 * centre, rel=1e-6)


def test_overload_factor_sets_the_total_load() -> None:
    doc = generate_federation(
        participants=5,
        contracts_per_participant=2,
        price_range_width=0.1,
        load_skew=0.5,
        capacity_spread=0.0,
        seed=2,
        overload=1.3,
    )
    assert sum(t.load for t in doc.tasks) == pytest.approx(1.3 * 5 * 80.0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"participants": 1}, "participants"),
        ({"contracts_per_participant": 0}, "contracts_per_participant"),
        ({"price_range_width": -0.1}, "price_range_width"),
        ({"load_skew": -1.0}, "load_skew"),
    ],
)
def test_bad_parameters_name_themselves(kwargs, name) -> None:
    base = dict(
        participants=5,
        contracts_per_participant=2,
        price_range_width=0.1,
        load_skew=0.5,
        capacity_spread=0.2,
        seed=0,
    )
    with pytest.raises(ValueError, match=name):
        generate_federation(**{**base, **kwargs})


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 30),
    tasks=st.integers(1, 8),
    seed=st.integers(0, 10_000),
    skew=st.floats(0.0, 2.0),
    spread=st.floats(0.0, 1.0),
    common=st.booleans(),
)
def test_no_task_is_larger_than_half_the_smallest_threshold_and_load_is_kept(
    n, tasks, seed, skew, spread, common
) -> None:
    kw = dict(
        participants=n,
        contracts_per_participant=2,
        price_range_width=0.1,
        load_skew=skew,
        capacity_spread=spread,
        seed=seed,
        tasks_per_participant=tasks,
        overload=0.7,
        common_price=common,
    )
    doc = generate_federation(**kw)
    thresholds = _generator_thresholds(doc, common)
    assert max(t.load for t in doc.tasks) <= MAX_TASK_FRACTION * min(thresholds) * (1 + 1e-9)
    assert min(Counter(t.owner for t in doc.tasks).values()) >= tasks
    assert sum(t.load for t in doc.tasks) == pytest.approx(0.7 * sum(thresholds))


def _generator_thresholds(doc, common: bool) -> list[float]:
    caps = [p.capacity for p in doc.participants]
    if not common:
        return [THRESHOLD_UTILISATION * c for c in caps]
    median_mc = float(np.median([MM1Cost(c).derivative(THRESHOLD_UTILISATION * c) for c in caps]))
    return [threshold_for_price(MM1Cost(c), median_mc) for c in caps]
