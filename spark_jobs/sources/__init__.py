"""Sources: the streams a participant's own work brings into the federation, at its owner's host.

A source task (``source:`` in its work, ``app.work.spec.SourceSpec``) runs in the agent that
hosts it (its owner's, unless placed on a partner) and feeds that agent's replayable log of its
output stream, ``<task>.out``, which SUnion fragments downstream read:

- ``files``: Spark's file stream source over a directory (``spark_jobs.sources.files``);
- ``nats``: a NATS JetStream stream, read by sequence number (``spark_jobs.sources.nats``);
- ``flight``: batches an application publishes (``app.publish``); the agent only serves the log
  and, with ``idle_advance``, closes its buckets by the wall clock (``spark_jobs.sources.flight``);
- ``generator``: the seeded generator (``spark_jobs.runtime.participant_host._Publisher``).

Every kind writes by one rule (``spark_jobs.sources.buckets``): ``stime`` is the declared event
time; buckets are appended in event-time order as they close; the BOUNDARY is the bucket of
(latest event time - ``lateness``, default 0) and follows the data, or the wall clock too with
``idle_advance: true``; later rows are counted and dropped. Files and NATS keep their position
under the agent's data directory (``<data dir>/sources/<task>/``) and resume from it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.work.spec import SourceSpec, Work

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_jobs.sources.buckets import SourceLog

__all__ = ["Runner", "SourceContext", "idle_advance", "runner_for", "source_spec"]


class Runner(Protocol):
    """A running source: ``run`` until ``stopped`` is set (in a thread of its own)."""

    stopped: threading.Event

    def run(self) -> None: ...


@dataclass(frozen=True)
class SourceContext:
    """Where a source runs: its task, the log it feeds, and the agent's means."""

    task: str
    stream: str
    location: str  # the Flight endpoint holding the log (this agent's)
    bucket_seconds: float
    state_dir: Path  # <data dir>/sources/<task>: the source's position, kept across restarts
    spark: Callable[[], Any] | None = None  # the agent's SparkSession (files)
    on_error: Callable[[str], None] | None = None  # the agent reports it on the task

    def source_log(self, client: Any, schema: pa.Schema, lateness_s: float) -> SourceLog:
        """The source's ``SourceLog`` on ``client``, its position resumed from the state dir:
        how a files or NATS source starts writing its task's log."""
        from spark_jobs.sources.buckets import SourceLog, StateStore

        log = SourceLog(
            client,
            self.stream,
            schema,
            StateStore(self.state_dir),
            bucket_seconds=self.bucket_seconds,
            lateness_s=lateness_s,
        )
        log.resume()
        return log


def source_spec(work: Mapping[str, Any]) -> SourceSpec | None:
    """The source a task's work declares (None: not a source of its own work)."""
    if not work or "source" not in work:
        return None
    return Work.from_json(work).source


def idle_advance(options: Mapping[str, Any]) -> bool:
    """``idle_advance: true``: event times track the wall clock, so a source without new rows
    closes buckets up to (now - lateness) as well. Default false: the boundary follows the data
    (a directory of last year's files must not see its buckets closed by today's clock)."""
    value = options.get("idle_advance", False)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def runner_for(spec: SourceSpec, context: SourceContext) -> Runner:
    """The runner of a files, nats or flight source (the generator is the host's own)."""
    if spec.kind == "files":
        from spark_jobs.sources.files import FileSource

        return FileSource(spec, context)
    if spec.kind == "nats":
        from spark_jobs.sources.nats import NatsSource

        return NatsSource(spec, context)
    if spec.kind == "flight":
        from spark_jobs.sources.flight import FlightSource

        return FlightSource(spec, context)
    raise ValueError(f"{context.task}: no runner for a {spec.kind} source")
