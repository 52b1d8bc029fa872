"""A pace file: the source of a warm hand-off plans fewer batches while its copy catches up.

A warm copy (``spark_jobs.runtime.warm``) runs exactly the source's micro-batches, and a batch
costs the copy about what it costs the source: a fixed 0.3-0.8 s of planning, state commit and
calls whatever the data, on cores the two queries share. The source of a 1 s-bucket fragment
runs about two batches a second (a data batch, then a no-data batch for the windows the
watermark closed), so it is busy most of the time and a copy following it batch by batch gains
almost nothing: on a quiet 2-core machine it stayed 4-7 batches behind for its whole budget
(bench/agents/README.md). So while a copy follows, the source waits before planning its next
data batch until the copy is at most one batch behind, but never longer than ``hold_s`` after
its last logged batch: its batches cover more buckets each (the same rows, fewer batches), and
its consumers see a batch at least every ``hold_s`` plus a batch's time, never an outage. The
copy then runs the same few, larger batches.

JSON, replaced atomically: ``{"offsets": the source's offset-log directory, "copy_at": the last
batch the copy committed, "hold_s": seconds, "until": wall-clock time}``. The copy refreshes it
with every poll of the source's offset log; past ``until`` it is ignored, so a copy that stopped
polling (cancelled, fallen back, its target dead) stops pacing the source within seconds. This
module is imported by SUnion in Spark's Python workers: the standard library only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from spark_jobs.runtime.follow import replace_json

# How long a paced source may wait after its last logged batch before planning the next one.
HOLD_S = 1.5
# How long a pace file counts after the copy's last poll (it polls every 0.1 s).
VALID_S = 3.0


def write(
    path: Path,
    offsets: Path,
    copy_at: int,
    *,
    hold_s: float = HOLD_S,
    valid_s: float = VALID_S,
) -> None:
    body: dict[str, object] = {
        "offsets": str(offsets),
        "copy_at": copy_at,
        "hold_s": hold_s,
        "until": time.time() + valid_s,
    }
    replace_json(path, body)


def clear(path: Path) -> None:
    path.unlink(missing_ok=True)


def holds(path: str, now: float | None = None) -> bool:
    """True when the source should plan no new batch yet: a copy is more than one batch behind
    its last logged batch, logged less than ``hold_s`` ago."""
    try:
        with open(path) as file:
            body = json.load(file)
    except (FileNotFoundError, ValueError):
        return False
    now = time.time() if now is None else now
    if now > float(body["until"]):
        return False
    try:
        logged = [int(name) for name in os.listdir(body["offsets"]) if name.isdigit()]
    except FileNotFoundError:
        return False
    if not logged:
        return False
    last = max(logged)
    if last - int(body["copy_at"]) <= 1:
        return False
    try:
        logged_at = os.path.getmtime(os.path.join(body["offsets"], str(last)))
    except FileNotFoundError:  # trimmed meanwhile: plan as usual
        return False
    return now - logged_at < float(body["hold_s"])
