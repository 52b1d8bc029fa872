"""Is a federation of *measured* loads in an acceptable allocation, and if not, why not. Pure.

Used by the live demo and the admin UI, which see loads as agents measure them; the simulator
uses the task-granular check in ``app.market.allocation``, which also needs the cost models.

DESIGN.md: an allocation is acceptable when every participant is below its capacity threshold
or, when the total offered load exceeds the total capacity (the sum of thresholds), every
participant is at or above its threshold (Balazinska et al., NSDI 2004, section 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Loads are measured, so a participant a hair over its threshold is not "overloaded".
TOLERANCE = 0.01


@dataclass(frozen=True)
class LoadPoint:
    name: str
    load: float
    threshold: float


@dataclass(frozen=True)
class Verdict:
    acceptable: bool
    overloaded_system: bool
    total_load: float
    total_threshold: float
    # One line per participant that breaks the rule, e.g. "A: load 92.0 > threshold 79.5".
    reasons: tuple[str, ...]

    @property
    def summary(self) -> str:
        if not self.reasons and self.acceptable:
            if self.overloaded_system:
                return "acceptable: the system is overloaded and every participant is at capacity"
            return "acceptable: every participant is below its capacity threshold"
        return "not acceptable: " + "; ".join(self.reasons)


def verdict(points: Sequence[LoadPoint], tolerance: float = TOLERANCE) -> Verdict:
    total_load = sum(p.load for p in points)
    total_threshold = sum(p.threshold for p in points)
    over = [p for p in points if p.load > p.threshold * (1 + tolerance)]
    overloaded = total_load > total_threshold
    if not over:
        return Verdict(True, overloaded, total_load, total_threshold, ())
    if overloaded:
        under = [p for p in points if p.load < p.threshold * (1 - tolerance)]
        reasons = tuple(
            f"{p.name} has room ({p.load:.1f} < threshold {p.threshold:.1f}) while the "
            f"system is overloaded ({total_load:.1f} > {total_threshold:.1f})"
            for p in under
        )
        return Verdict(not under, overloaded, total_load, total_threshold, reasons)
    room = ", ".join(p.name for p in points if p.load < p.threshold * (1 - tolerance))
    reasons = tuple(
        f"{p.name} is over its threshold ({p.load:.1f} > {p.threshold:.1f})"
        + (f" while {room} ha{'s' if ',' not in room else 've'} room" if room else "")
        for p in over
    )
    return Verdict(False, overloaded, total_load, total_threshold, reasons)
