"""A follow file: the micro-batches a warm copy must run, so that its batches are the source's.

A warm copy (``spark_jobs.runtime.warm``) runs a fragment's query at the target while the source
still runs it. Both start from the same checkpoint, but each would plan its own micro-batches
from the boundaries it sees, so batch N could cover other buckets at each host; the output log
keeps a batch id once, so two different batch N would lose or double rows. So the copy plans
nothing itself: SUnion's ``follow_file`` option makes its ``latestOffset`` answer, for the batch
the copy's Spark is about to log (one past the last in its offset log), the end the source logged
for that batch id. That includes the source's no-data batches (Spark runs one after a batch that
moved the watermark when no data waits; the copy's Spark, from the same state and told "no new
data", does the same). A batch the source has not logged yet is waited for (briefly: a query
blocked here cannot stop), not answered "no new data", which could make the copy's Spark run a
no-data batch where the source ran a data batch. Once the copy leads (its host is the host of
record), it plans as usual after the source's last logged batch.

JSON, replaced atomically: ``{"offsets": the copy's offset-log directory, "ends": {batch: end},
"lead": bool, "hold": consumer}``. Kept beside the checkpoint, so an agent that restarts the
fragment after a crash follows the source's batches up to its last before it plans its own. This
module is imported by SUnion in Spark's Python workers: the standard library only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

# How long the copy's Spark waits for a batch the source has not logged yet, per trigger.
WAIT_S = 1.0
_POLL_S = 0.02


def write(
    path: Path,
    offsets: Path,
    ends: Mapping[int, int],
    *,
    lead: bool = False,
    hold: str | None = None,
) -> None:
    """``offsets``: the copy's offset-log directory; ``ends``: batch id -> end bucket of the
    source's logged batches; ``hold``: the consumer under which the copy's inputs are held for
    it (released once the copy has read past the source's last batch)."""
    body = {
        "offsets": str(offsets),
        "ends": {str(batch): end for batch, end in ends.items()},
        "lead": lead,
        "hold": hold,
    }
    replace_json(path, body)


def replace_json(path: Path, body: dict[str, object]) -> None:
    """Write ``body`` to ``path`` atomically: a reader in Spark's Python worker sees the old
    file or the new one, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(body))
    os.replace(temporary, path)


def lead(path: Path) -> bool:
    """Let the copy plan its own batches after the source's last one (this host is the host of
    record now). False when there is no follow file."""
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return False
    body["lead"] = True
    replace_json(path, body)
    return True


def hold(path: Path) -> str | None:
    """The consumer holding the copy's inputs, None if none (or no follow file)."""
    try:
        found = json.loads(path.read_text()).get("hold")
    except FileNotFoundError:
        return None
    return None if found is None else str(found)


def _next_batch(offsets: str) -> int:
    try:
        logged = [int(name) for name in os.listdir(offsets) if name.isdigit()]
    except FileNotFoundError:
        return 0
    return max(logged, default=-1) + 1


_UNKNOWN = -(2**63)


def _answer(path: str, start: int) -> int | None:
    try:
        with open(path) as file:
            body = json.load(file)
    except FileNotFoundError:
        return None
    ends = {int(batch): int(end) for batch, end in body["ends"].items()}
    batch = _next_batch(body["offsets"])
    if batch in ends:
        # Not where the source stood before this batch: wait for good; the hand-off gives up
        # on a copy that does not catch up, and refuses one that ran other batches.
        return ends[batch] if ends.get(batch - 1, start) == start else start
    if body["lead"] and batch > max(ends, default=-1):
        return None
    return _UNKNOWN


def planned_end(path: str, start: int, wait_s: float = WAIT_S) -> int | None:
    """The end bucket of the batch the copy is about to run, which starts at ``start``: the
    source's; ``start`` (no new data) when the source has not logged it within ``wait_s``;
    None when the copy plans for itself (leading past the source's last batch, or no file)."""
    deadline = time.monotonic() + wait_s
    while True:
        answer = _answer(path, start)
        if answer != _UNKNOWN:
            return answer
        if time.monotonic() >= deadline:
            return start
        time.sleep(_POLL_S)
