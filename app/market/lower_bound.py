"""A lower bound on the best total cost any allocation can reach.

Continuous relaxation: tasks become divisible and load may flow along contract edges over any
number of hops. With uncapacitated edges, load can reach any participant of its connected
component, so the relaxation is, per component C,

    minimise  sum_i D_i(x_i)   subject to   sum_i x_i = sum_i L_i,   x_i >= 0.

Its Lagrangian dual is  g(lam) = lam * total + sum_i min_{x >= 0} (D_i(x) - lam * x), and by weak
duality *every* lam gives a lower bound; for convex D_i the best lam (equal marginal costs,
"water-filling") closes the gap. The inner minimum is at the load where D_i' = lam, which is
``threshold_for_price`` (SciPy's brentq), and lam itself is found with brentq on the primal
residual sum_i x_i(lam) - total. A task-granular BPM allocation is feasible for the relaxation,
so its cost can never be below this bound.

``relaxed_optimum_slsqp`` solves the same relaxation directly with SLSQP, to cross-check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from scipy import optimize

from app.market.cost_models import CostModel, threshold_for_price


def components(names: Sequence[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Connected components of the contract graph among ``names``, in a deterministic order."""
    parent = {n: n for n in names}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b in edges:
        if a in parent and b in parent:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(find(n), []).append(n)
    return [groups[k] for k in sorted(groups)]


def _dual(models: Sequence[CostModel], total: float, lam: float) -> float:
    value = lam * total
    for m in models:
        x = threshold_for_price(m, lam)
        value += m.cost(x) - lam * x
    return value


def component_bound(models: Sequence[CostModel], total: float) -> float:
    """The relaxation's optimum for one component carrying ``total`` load."""
    if total <= 0:
        return math.fsum(m.cost(0.0) for m in models)
    if len(models) == 1:
        return models[0].cost(total)

    def residual(lam: float) -> float:
        return math.fsum(threshold_for_price(m, lam) for m in models) - total

    lo = 0.0
    hi = max(m.derivative(0.0) for m in models) + 1.0
    while residual(hi) < 0:
        hi *= 4.0
        if hi > 1e12:
            # Marginal costs grow without reaching the total: the load cannot fit (an M/M/1
            # component loaded past its total capacity), so every allocation costs infinity.
            return math.inf
    lam = float(optimize.brentq(residual, lo, hi, xtol=1e-13, rtol=1e-12))
    return _dual(models, total, lam)


def cost_lower_bound(
    models: Mapping[str, CostModel],
    loads: Mapping[str, float],
    edges: Iterable[tuple[str, str]],
) -> float:
    """Sum over the contract graph's components of the relaxation's optimum."""
    names = sorted(models)
    bound = 0.0
    for group in components(names, edges):
        part = component_bound([models[n] for n in group], math.fsum(loads[n] for n in group))
        if math.isinf(part):
            return math.inf
        bound += part
    return bound


def relaxed_optimum_slsqp(models: Sequence[CostModel], total: float) -> float:
    """The same one-component relaxation solved directly with SLSQP (for cross-checking)."""
    caps = np.array([m.capacity for m in models])
    start = total * caps / caps.sum()

    def objective(x: np.ndarray) -> float:
        value = math.fsum(m.cost(float(v)) for m, v in zip(models, x, strict=True))
        return value if math.isfinite(value) else 1e12

    result = optimize.minimize(
        objective,
        start,
        method="SLSQP",
        # An M/M/1 cost is infinite at capacity; other models have no hard ceiling.
        bounds=[
            (0.0, m.capacity * (1 - 1e-9) if math.isinf(m.cost(m.capacity)) else None)
            for m in models
        ],
        constraints=[{"type": "eq", "fun": lambda x: float(np.sum(x)) - total}],
        options={"ftol": 1e-12, "maxiter": 500},
    )
    return float(result.fun)
