"""Liveness of a participant as the service sees it, from its heartbeats. Pure.

Borealis's failure detector declares a peer failed after a number of missed heartbeats (DESIGN.md:
every 100 ms, failed after 3 misses, both configurable). The service applies the same rule to the
agents' heartbeats at its own, coarser interval: one missed beat makes a participant suspect,
``misses`` make it failed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

Liveness = Literal["unknown", "online", "suspect", "failed"]


def liveness(
    last_heartbeat: datetime | None, now: datetime, *, interval_seconds: float, misses: int
) -> Liveness:
    if last_heartbeat is None:
        return "unknown"
    silent = (now - last_heartbeat).total_seconds()
    if silent <= interval_seconds:
        return "online"
    if silent <= interval_seconds * misses:
        return "suspect"
    return "failed"
