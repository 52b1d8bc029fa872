"""Cost models: values, derivatives, brentq thresholds, the fitted model and refusals."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.market.cost_models import (
    CostModelError,
    MM1Cost,
    PiecewiseLinearCost,
    build_cost_model,
    marginal_cost,
    set_marginal_cost,
    threshold_by_root,
    threshold_for_price,
)


def test_mm1_cost_and_marginal_cost_match_borealis() -> None:
    m = MM1Cost(capacity=100)
    assert m.cost(80) == pytest.approx(4.0)
    assert m.derivative(80) == pytest.approx(0.25)
    assert math.isinf(m.cost(100)) and math.isinf(m.derivative(120))
    # Average MC of removing 5 units at 80: (D(80) - D(75)) / 5 = (4 - 3) / 5.
    assert marginal_cost(m, 80, -5) == pytest.approx(0.2)
    assert set_marginal_cost(m, 80, [2.0, 3.0], add=True) == pytest.approx((85 / 15 - 4) / 5)


@pytest.mark.parametrize("price", [0.02, 0.24, 0.25, 0.26, 3.0])
def test_mm1_threshold_matches_closed_form(price: float) -> None:
    # dD/dL = 1 / (C (1 - u)^2) = p  =>  L = C (1 - sqrt(1 / (C p))).
    m = MM1Cost(capacity=100)
    expected = 100 * (1 - math.sqrt(1 / (100 * price)))
    assert threshold_for_price(m, price) == pytest.approx(expected)
    assert threshold_by_root(m, price) == pytest.approx(expected, rel=1e-9)


def test_threshold_below_first_unit_is_zero() -> None:
    assert threshold_for_price(MM1Cost(capacity=100), 0.001) == 0.0


def test_piecewise_threshold_lands_on_the_knot_where_slope_passes_price() -> None:
    m = build_cost_model({"kind": "piecewise", "points": [[0, 0], [50, 5], [80, 20]]}, 100)
    assert isinstance(m, PiecewiseLinearCost)
    assert m.derivative(40) == pytest.approx(0.1)
    assert m.derivative(60) == pytest.approx(0.5)
    assert threshold_for_price(m, 0.3) == pytest.approx(50.0, abs=1e-6)


def test_quadratic_derivative() -> None:
    m = build_cost_model({"kind": "quadratic", "a": 1, "b": 2}, 10)
    assert m.derivative(5) == pytest.approx((1 + 2 * 2 * 0.5) / 10)


def test_fitted_model_recovers_a_convex_curve() -> None:
    # Samples of 1 + 2u + 3u^3 with capacity 100.
    samples = [[x, 1 + 2 * (x / 100) + 3 * (x / 100) ** 3] for x in range(0, 101, 10)]
    m = build_cost_model({"kind": "fitted", "samples": samples}, 100)
    for x in (5, 35, 75, 95):
        assert m.cost(x) == pytest.approx(1 + 2 * x / 100 + 3 * (x / 100) ** 3, rel=1e-3)
    assert m.derivative(50) == pytest.approx((2 + 9 * 0.25) / 100, rel=1e-2)


def test_fitted_model_refuses_a_concave_point_and_names_it() -> None:
    samples = [[0, 0], [20, 1], [40, 2], [60, 9], [80, 4], [100, 5]]
    with pytest.raises(CostModelError) as err:
        build_cost_model({"kind": "fitted", "samples": samples}, 100)
    assert err.value.field == "cost_model.samples[3]"
    assert "sample 3 (load 60.0" in err.value.detail


def test_fitted_model_refuses_decreasing_samples() -> None:
    samples = [[0, 10], [50, 5], [100, 0]]
    with pytest.raises(CostModelError) as err:
        build_cost_model({"kind": "fitted", "samples": samples}, 100)
    assert err.value.field is not None and err.value.field.startswith("cost_model.samples")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"kind": "fitted", "samples": [[0, 0], [1, 1]]}, "cost_model.samples"),
        ({"kind": "fitted", "samples": [[0, 0], [-1, 1], [2, 3]]}, "cost_model.samples[1]"),
        ({"kind": "piecewise", "points": [[0, 0], [50, 10], [100, 12]]}, "cost_model.points[1]"),
        ({"kind": "piecewise", "points": [[0, 5], [50, 4]]}, "cost_model.points[1]"),
        ({"kind": "quadratic", "a": 1, "b": -1}, "cost_model.b"),
        ({"kind": "mm1", "scale": 0}, "cost_model.scale"),
        ({"kind": "cubic"}, "cost_model.kind"),
    ],
)
def test_bad_models_are_refused_naming_the_field(spec: dict, field: str) -> None:
    with pytest.raises(CostModelError) as err:
        build_cost_model(spec, 100)
    assert err.value.field == field


def test_negative_capacity_is_refused() -> None:
    with pytest.raises(CostModelError) as err:
        build_cost_model({"kind": "mm1"}, -5)
    assert err.value.field == "capacity"


def _convex_increasing_on(model, xs: list[float]) -> None:
    values = [model.cost(x) for x in xs]
    for a, b in itertools.pairwise(values):
        assert b >= a - 1e-9
    for (x0, y0), (x1, y1), (x2, y2) in zip(
        zip(xs, values, strict=True),
        list(zip(xs, values, strict=True))[1:],
        list(zip(xs, values, strict=True))[2:],
        strict=False,
    ):
        left = (y1 - y0) / (x1 - x0)
        right = (y2 - y1) / (x2 - x1)
        assert right >= left - 1e-7 * max(1.0, abs(left))


coords = st.floats(min_value=0, max_value=200, allow_nan=False)
values = st.floats(min_value=-50, max_value=50, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(coords, values), min_size=2, max_size=8))
def test_every_accepted_piecewise_model_is_convex_and_increasing(points) -> None:
    points = sorted(points)
    try:
        model = build_cost_model({"kind": "piecewise", "points": points}, 100)
    except CostModelError as exc:
        assert exc.field is not None and exc.field.startswith("cost_model.points")
        return
    lo, hi = points[0][0], points[-1][0] + 50
    _convex_increasing_on(model, [lo + (hi - lo) * k / 60 for k in range(61)])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=100, allow_nan=False),
            st.floats(min_value=0, max_value=20, allow_nan=False),
        ),
        min_size=3,
        max_size=10,
    )
)
def test_every_accepted_fitted_model_is_convex_and_increasing(samples) -> None:
    assume(len({round(x, 6) for x, _ in samples}) >= 2)
    try:
        model = build_cost_model({"kind": "fitted", "samples": samples}, 100)
    except CostModelError as exc:
        assert exc.field is not None and exc.field.startswith("cost_model.samples")
        return
    _convex_increasing_on(model, [k * 2.0 for k in range(76)])
    derivs = [model.derivative(k * 2.0) for k in range(76)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(derivs))
    assert derivs[-1] > 0
