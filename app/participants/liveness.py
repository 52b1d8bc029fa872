"""Liveness of a participant as the service shows it, from its heartbeats. Pure.

``failed`` is never computed here: only the registry's failure sweeper declares it, once a
heartbeat window closed unanswered (``app.participants.failures``, the detector's one rule), and
only a rejoin ends it. Between heartbeats a participant is ``online``; silent for more than one
interval it is ``suspect`` (shown, never acted on).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

Liveness = Literal["unknown", "online", "suspect", "failed"]


def liveness(
    last_heartbeat: datetime | None,
    now: datetime,
    *,
    interval_seconds: float,
    failed_at: datetime | None = None,
) -> Liveness:
    if failed_at is not None:
        return "failed"
    if last_heartbeat is None:
        return "unknown"
    silent = (now - last_heartbeat).total_seconds()
    return "online" if silent <= interval_seconds else "suspect"
