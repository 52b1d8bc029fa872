"""Private, increasing, convex cost functions D(load) and their marginal costs.

Borealis (Balazinska et al., "Contract-Based Load Management in Federated Distributed Systems",
NSDI 2004) models a participant as an M/M/1 queue: with utilisation u = load / capacity the cost
is D(u) = u / (1 - u), infinite at u >= 1. Other convex models are accepted only after their
convexity and monotonicity have been checked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


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


def marginal_cost(model: CostModel, load: float, delta: float) -> float:
    """Average marginal cost per unit load of adding (delta > 0) or removing (delta < 0) load.

    MC = |D(L + delta) - D(L)| / |delta|, as DESIGN.md defines it. For delta == 0 it is the
    derivative, taken numerically from the right.
    """
    if delta == 0:
        step = max(1e-6, 1e-6 * max(abs(load), 1.0))
        return (model.cost(load + step) - model.cost(load)) / step
    after = model.cost(max(load + delta, 0.0))
    before = model.cost(load)
    if math.isinf(after) or math.isinf(before):
        return math.inf
    return abs(after - before) / abs(delta)


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


@dataclass(frozen=True)
class QuadraticCost:
    """D(L) = a * u + b * u^2 with u = L / capacity; a, b >= 0 keep it increasing and convex."""

    capacity: float
    a: float = 1.0
    b: float = 1.0

    def cost(self, load: float) -> float:
        u = load / self.capacity
        return self.a * u + self.b * u * u


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


def build_cost_model(spec: Mapping[str, Any] | None, capacity: float) -> CostModel:
    """Build a checked cost model from its document form, e.g. ``{"kind": "mm1"}``."""
    if capacity <= 0:
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
    raise CostModelError(f"unknown cost model kind {kind!r}", field="cost_model.kind")
