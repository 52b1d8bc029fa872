"""The lower bound: exact on symmetric cases, equal to SLSQP's optimum, split by component."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.market.cost_models import MM1Cost, QuadraticCost
from app.market.lower_bound import (
    component_bound,
    components,
    cost_lower_bound,
    relaxed_optimum_slsqp,
)


def test_equal_participants_split_the_load_equally() -> None:
    models = [MM1Cost(100), MM1Cost(100), MM1Cost(100)]
    # 180 units over three: 60 each, cost 3 * 60/40.
    assert component_bound(models, 180.0) == pytest.approx(3 * 1.5, rel=1e-9)


def test_components_keep_their_load() -> None:
    models = {"A": MM1Cost(100), "B": MM1Cost(100), "C": MM1Cost(100)}
    loads = {"A": 90.0, "B": 10.0, "C": 50.0}
    assert components(["A", "B", "C"], [("A", "B")]) == [["A", "B"], ["C"]]
    bound = cost_lower_bound(models, loads, [("A", "B")])
    assert bound == pytest.approx(2 * 1.0 + 1.0)


def test_load_past_total_capacity_has_no_finite_bound() -> None:
    assert math.isinf(component_bound([MM1Cost(100), MM1Cost(50)], 160.0))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(min_value=20, max_value=300), min_size=2, max_size=6),
    st.floats(min_value=0.05, max_value=0.9),
)
def test_dual_bound_matches_slsqp(capacities, fill) -> None:
    models = [MM1Cost(c) for c in capacities]
    total = fill * sum(capacities)
    dual = component_bound(models, total)
    direct = relaxed_optimum_slsqp(models, total)
    assert dual <= direct + 1e-7 * max(1.0, direct)
    assert dual == pytest.approx(direct, rel=1e-4, abs=1e-6)


def test_quadratic_bound_matches_slsqp() -> None:
    models = [QuadraticCost(100, 1, 2), QuadraticCost(50, 0.5, 1), QuadraticCost(200, 0, 3)]
    assert component_bound(models, 150.0) == pytest.approx(
        relaxed_optimum_slsqp(models, 150.0), rel=1e-5
    )
