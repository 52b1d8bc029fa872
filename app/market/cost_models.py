"""Private, increasing, convex cost functions D(load) and their marginal costs.

Borealis (Balazinska et al., "Contract-Based Load Management in Federated Distributed Systems",
NSDI 2004) models a participant as an M/M/1 queue: with utilisation u = load / capacity the cost
is D(u) = u / (1 - u), infinite at u >= 1. Other convex models are accepted only after their
convexity and monotonicity have been checked.

Every model has ``cost(load)`` and ``derivative(load)``: the derivative is the marginal cost of
the last unit of load, the quantity a capacity threshold is defined by (MC(T) = price).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from scipy import optimize


class CostModelError(ValueError):
    """A cost model that cannot be used; ``field`` names the offending part of its spec."""

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class CostModel(Protocol):
    @property
    def capacity(self) -> float: ...

    def cost(self, load: float) -> float: ...

    def derivative(self, load: float) -> float: ...


def marginal_cost(model: CostModel, load: float, delta: float) -> float:
    """Average marginal cost per unit load of adding (delta > 0) or removing (delta < 0) load.

    MC = |D(L + delta) - D(L)| / |delta|, as DESIGN.md defines it. For delta == 0 it is the
    derivative (the marginal cost of the last unit).
    """
    if delta == 0:
        return model.derivative(load)
    if type(model) is MM1Cost:
        # ``MM1Cost.cost`` inlined (the simulator's hottest call): the same operations, so the
        # same doubles; ``max(x, 0.0)`` keeps x unless 0.0 > x, as below.
        capacity, scale = model.capacity, model.scale
        lower = load + delta
        if lower < 0.0:
            lower = 0.0
        u_after, u_before = lower / capacity, load / capacity
        if u_after >= 1.0 or u_before >= 1.0:
            return math.inf
        after_, before_ = scale * u_after / (1.0 - u_after), scale * u_before / (1.0 - u_before)
        if math.isinf(after_) or math.isinf(before_):
            return math.inf
        return abs(after_ - before_) / abs(delta)
    after = model.cost(max(load + delta, 0.0))
    before = model.cost(load)
    if math.isinf(after) or math.isinf(before):
        return math.inf
    return abs(after - before) / abs(delta)


def mm1_removal_savings(
    capacity: np.ndarray, scale: np.ndarray, load: np.ndarray, size: np.ndarray
) -> np.ndarray:
    """``marginal_cost(MM1Cost(capacity, scale), load, -size)`` element-wise (each size > 0).

    The scalar path's operations in the same order (``MM1Cost.cost`` at max(load - size, 0)
    and at load, the absolute difference over the size; infinite when either cost is): IEEE
    arithmetic gives identical doubles, which the simulator relies on to decide exactly as the
    scalar path would.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        u_after = np.maximum(load - size, 0.0) / capacity
        u_before = load / capacity
        after = np.where(u_after >= 1.0, np.inf, scale * u_after / (1.0 - u_after))
        before = np.where(u_before >= 1.0, np.inf, scale * u_before / (1.0 - u_before))
        saving = np.abs(after - before) / np.abs(-size)
    return np.where(np.isinf(after) | np.isinf(before), np.inf, saving)


def set_marginal_cost(
    model: CostModel, load: float, task_loads: Sequence[float], *, add: bool
) -> float:
    """Average marginal cost per unit load of adding or removing a set of tasks at ``load``."""
    total = math.fsum(task_loads)
    if total <= 0:
        return model.derivative(load)
    return marginal_cost(model, load, total if add else -total)


def threshold_for_price(model: CostModel, price: float) -> float:
    """The capacity threshold a price implies: the load T with MC(T) = price.

    Solved with SciPy's Brent's method on MC(L) - price (``threshold_by_root``), except for the
    M/M/1 model whose closed form C (1 - sqrt(scale / (C p))) is exact. When even the first unit
    costs more than ``price`` the threshold is 0; when MC never reaches it (a model with bounded
    slope) the search stops at 64 times the capacity.
    """
    if not math.isfinite(price) or price <= model.derivative(0.0):
        return 0.0 if math.isfinite(price) else math.inf
    if isinstance(model, MM1Cost):
        # Closed form, for speed in sweeps (the lower bound nests this inside a root search);
        # tests check it against the root finder below.
        return model.capacity * (1.0 - math.sqrt(model.scale / (model.capacity * price)))
    return threshold_by_root(model, price)


def threshold_by_root(model: CostModel, price: float) -> float:
    """MC(T) = price by Brent's method; MC is increasing because D is convex."""
    if price <= model.derivative(0.0):
        return 0.0

    def excess(load: float) -> float:
        mc = model.derivative(load)
        # brentq needs finite values; past an M/M/1 capacity any large number keeps the sign.
        return (mc if math.isfinite(mc) else 1e300) - price

    hi = model.capacity
    while excess(hi) < 0:
        hi *= 2.0
        if hi > 64 * model.capacity:
            return hi
    return float(optimize.brentq(excess, 0.0, hi, xtol=1e-9 * max(1.0, hi), rtol=1e-12))


@dataclass(frozen=True)
class MM1Cost:
    """D(L) = scale * u / (1 - u) with u = L / capacity; infinite at or past capacity."""

    capacity: float
    scale: float = 1.0

    def cost(self, load: float) -> float:
        u = load / self.capacity
        if u >= 1.0:
            return math.inf
        return self.scale * u / (1.0 - u)

    def derivative(self, load: float) -> float:
        u = load / self.capacity
        if u >= 1.0:
            return math.inf
        return self.scale / (self.capacity * (1.0 - u) ** 2)


@dataclass(frozen=True)
class QuadraticCost:
    """D(L) = a * u + b * u^2 with u = L / capacity; a, b >= 0 keep it increasing and convex."""

    capacity: float
    a: float = 1.0
    b: float = 1.0

    def cost(self, load: float) -> float:
        u = load / self.capacity
        return self.a * u + self.b * u * u

    def derivative(self, load: float) -> float:
        return (self.a + 2.0 * self.b * load / self.capacity) / self.capacity


@dataclass(frozen=True)
class PiecewiseLinearCost:
    """Linear interpolation between (load, cost) points; past the last point the last slope."""

    capacity: float
    points: tuple[tuple[float, float], ...]

    def cost(self, load: float) -> float:
        pts = self.points
        if load <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            if load <= x1:
                return y0 + (y1 - y0) * (load - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = pts[-2], pts[-1]
        return y1 + (y1 - y0) / (x1 - x0) * (load - x1)

    def derivative(self, load: float) -> float:
        # The slope of the segment the last unit falls in (at a knot, the segment to its left),
        # so a threshold lands on the knot where the slope first exceeds the price.
        pts = self.points
        if load <= pts[0][0]:
            return 0.0
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            if load <= x1:
                return (y1 - y0) / (x1 - x0)
        (x0, y0), (x1, y1) = pts[-2], pts[-1]
        return (y1 - y0) / (x1 - x0)


@dataclass(frozen=True)
class FittedCost:
    """D(L) = c + a * u + b * u^q (u = L / capacity, a, b, c >= 0, q >= 1), fitted to samples.

    The family is convex and increasing for every admissible parameter, so the fit can only
    fail by fitting badly, and then the samples are refused (see ``fit_cost_model``).
    """

    capacity: float
    a: float
    b: float
    c: float
    q: float

    def cost(self, load: float) -> float:
        u = max(load, 0.0) / self.capacity
        return self.c + self.a * u + self.b * u**self.q

    def derivative(self, load: float) -> float:
        u = max(load, 0.0) / self.capacity
        return (self.a + self.b * self.q * u ** (self.q - 1.0)) / self.capacity


# A fitted model is refused when some sample sits further than this fraction of the samples'
# value range from the best convex increasing fit: such a point shows the data is not convex or
# not increasing, beyond measurement noise.
FIT_TOLERANCE = 0.1
MAX_EXPONENT = 12.0


def fit_cost_model(
    samples: Sequence[tuple[float, float]],
    capacity: float,
    *,
    field: str = "cost_model.samples",
    tolerance: float = FIT_TOLERANCE,
) -> FittedCost:
    """Least-squares fit (SciPy, bounded trust region) of a convex increasing cost to samples.

    Refuses, naming the offending sample: fewer than three samples, a non-finite or negative
    load, a sample further than ``tolerance`` x the value range from the best fit, or samples
    that show no increase at all.
    """
    if len(samples) < 3:
        raise CostModelError(f"needs at least three samples, got {len(samples)}", field=field)
    for i, (x, y) in enumerate(samples):
        if not (math.isfinite(x) and math.isfinite(y)) or x < 0:
            raise CostModelError(
                f"sample {i} (load {x}, value {y}) must have a finite load >= 0 and a finite value",
                field=f"{field}[{i}]",
            )
    xs = np.array([s[0] for s in samples], dtype=float) / capacity
    ys = np.array([s[1] for s in samples], dtype=float)
    if np.ptp(xs) == 0:
        raise CostModelError("all samples are at the same load", field=field)
    spread = float(np.ptp(ys))
    if spread == 0:
        raise CostModelError(
            "the value never changes across the samples: not increasing", field=field
        )

    def residuals(theta: np.ndarray) -> np.ndarray:
        a, b, c, q = theta
        return c + a * xs + b * np.power(xs, q) - ys

    scale = spread / max(float(xs.max()), 1e-12)
    start = np.array([scale / 2, scale / 2, max(float(ys.min()), 0.0), 2.0])
    fit = optimize.least_squares(
        residuals,
        start,
        bounds=([0.0, 0.0, 0.0, 1.0], [np.inf, np.inf, np.inf, MAX_EXPONENT]),
        x_scale="jac",
    )
    a, b, c, q = (float(v) for v in fit.x)
    err = np.abs(residuals(fit.x)) / spread
    worst = int(np.argmax(err))
    if err[worst] > tolerance:
        x, y = samples[worst]
        raise CostModelError(
            f"sample {worst} (load {x}, value {y}) is {err[worst]:.0%} of the value range away "
            "from the best convex increasing fit: the samples are not convex and increasing",
            field=f"{field}[{worst}]",
        )
    if a <= 0 and b <= 0:
        raise CostModelError("the best fit is flat: the samples do not increase", field=field)
    return FittedCost(capacity=capacity, a=a, b=b, c=c, q=q)


MIN_POINT_GAP = 1e-9


def check_convex_increasing(
    points: Sequence[tuple[float, float]], *, field: str, tolerance: float = 1e-9
) -> None:
    """Refuse points that do not describe an increasing convex function, naming the bad point."""
    if len(points) < 2:
        raise CostModelError("needs at least two points", field=field)
    for i in range(1, len(points)):
        (x0, y0), (x1, y1) = points[i - 1], points[i]
        if x1 <= x0:
            raise CostModelError(
                f"point {i} has load {x1}, not greater than the previous load {x0}",
                field=f"{field}[{i}]",
            )
        # Loads closer than this give a slope that overflows when extrapolated (a cost of
        # inf at a finite load); no measured cost curve is resolved that finely.
        if x1 - x0 <= MIN_POINT_GAP * max(1.0, abs(x1)):
            raise CostModelError(
                f"point {i} has load {x1}, too close to the previous load {x0} to give a slope",
                field=f"{field}[{i}]",
            )
        if y1 < y0 - tolerance:
            raise CostModelError(
                f"cost falls from {y0} to {y1} at point {i} (load {x1}): not increasing",
                field=f"{field}[{i}]",
            )
    for i in range(1, len(points) - 1):
        (x0, y0), (x1, y1), (x2, y2) = points[i - 1], points[i], points[i + 1]
        left = (y1 - y0) / (x1 - x0)
        right = (y2 - y1) / (x2 - x1)
        if right < left - tolerance:
            raise CostModelError(
                f"slope drops from {left:.6g} to {right:.6g} at point {i} (load {x1}): not convex",
                field=f"{field}[{i}]",
            )
    if points[-1][1] <= points[0][1]:
        raise CostModelError("cost never increases across the points", field=field)


def build_cost_model(spec: Mapping[str, Any] | None, capacity: float) -> CostModel:
    """Build a checked cost model from its document form, e.g. ``{"kind": "mm1"}``."""
    if not (capacity > 0 and math.isfinite(capacity)):
        raise CostModelError(f"capacity must be positive, got {capacity}", field="capacity")
    spec = dict(spec or {"kind": "mm1"})
    kind = spec.get("kind", "mm1")
    if kind == "mm1":
        scale = float(spec.get("scale", 1.0))
        if scale <= 0:
            raise CostModelError("scale must be positive", field="cost_model.scale")
        return MM1Cost(capacity=capacity, scale=scale)
    if kind == "quadratic":
        a, b = float(spec.get("a", 1.0)), float(spec.get("b", 1.0))
        if a < 0:
            raise CostModelError(f"a = {a} makes cost fall with load", field="cost_model.a")
        if b < 0:
            raise CostModelError(f"b = {b} makes the cost concave", field="cost_model.b")
        if a == 0 and b == 0:
            raise CostModelError("a and b are both zero: cost must increase", field="cost_model")
        return QuadraticCost(capacity=capacity, a=a, b=b)
    if kind == "piecewise":
        raw = spec.get("points") or []
        points = tuple((float(x), float(y)) for x, y in raw)
        check_convex_increasing(points, field="cost_model.points")
        return PiecewiseLinearCost(capacity=capacity, points=points)
    if kind == "fitted":
        raw = spec.get("samples") or []
        samples = [(float(x), float(y)) for x, y in raw]
        return fit_cost_model(samples, capacity, field="cost_model.samples")
    raise CostModelError(f"unknown cost model kind {kind!r}", field="cost_model.kind")
