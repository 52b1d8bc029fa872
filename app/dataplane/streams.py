"""Names of the streams on the data plane.

A task's output is ``<task>.out``, kept at its owner. An active replica of the task on
participant ``H`` keeps its own log of the same output on ``H``'s endpoint, ``<task>.out@H``, and
a DPC node writes every message it sends (tentative rows, UNDO, REC_DONE) to a companion stream,
``<stream>.dpc``. The registry's token rules and the agents both read names through here.
"""

from __future__ import annotations

from dataclasses import dataclass

OUTPUT_SUFFIX = ".out"
REPLICA_MARK = "@"
DPC_SUFFIX = ".dpc"


@dataclass(frozen=True)
class StreamName:
    task: str
    # The replica holder whose own log it is (None: the task's output at its owner).
    holder: str | None = None
    # The DPC companion of that log.
    companion: bool = False


def output_stream(task: str) -> str:
    return f"{task}{OUTPUT_SUFFIX}"


def replica_stream(task: str, holder: str) -> str:
    return f"{task}{OUTPUT_SUFFIX}{REPLICA_MARK}{holder}"


def parse_stream(name: str) -> StreamName | None:
    """The task (and replica holder) a stream name belongs to; None for a name that is neither
    a task's output nor a replica's log of it."""
    head, mark, holder = name.rpartition(REPLICA_MARK)
    if mark and head.endswith(OUTPUT_SUFFIX) and holder:
        companion = holder.endswith(DPC_SUFFIX)
        holder = holder.removesuffix(DPC_SUFFIX) if companion else holder
        task = head.removesuffix(OUTPUT_SUFFIX)
        if task and holder:
            return StreamName(task, holder, companion)
        return None
    if name.endswith(OUTPUT_SUFFIX) and len(name) > len(OUTPUT_SUFFIX):
        return StreamName(name.removesuffix(OUTPUT_SUFFIX))
    return None
