"""An active replica promoted by a failover: the running DPC copy goes on as the task's host.

When the host of a task with an ``active_standby`` replica fails, the replica's holder already
runs the fragment (``spark_jobs.runtime.active``), from its own state, on its own input
position, writing its own log ``<task>.out@<holder>``. The failover is the one movement path
with nothing to restore (``movement.RunningCopy``): the registry's failover movement is prepared
and committed (the commit fences the failed host out of the task's log), and instead of
starting a query the copy is taken over here.

Where the task's output goes on: into the task's own log, ``<task>.out`` at its owner, not by
switching the consumers to the copy's log. Every reader of the task's output (the fragments
downstream, whose inputs name ``<task>.out`` at the owner; the operator; the reference checks)
reads that log, and the output log stays put while the fragment moves: a switch would have to
reach each of them. So ``PromotedCopy`` forwards the copy's stable log into it:

- what it forwards is complete: the buckets below the copy log's BOUNDARY (a DPC sink holds its
  BOUNDARY back while its output is tentative, so only stable rows, corrections included, ever
  pass; tentative rows stay on the ``.dpc`` companion);
- precise: the rows the failed host had already written are left out, each once
  (``soutput.leave_out``; the fragment is deterministic, so the copy computes exactly those
  again). The copy covers every window the failed host had not emitted only if its first
  window ends at or before the failed host's output BOUNDARY (``covers``); otherwise the
  takeover falls back to the restart path;
- written with the failover's epoch (the log's fence) and batch ids in that epoch's namespace,
  numbered from ``FORWARD_BASE`` so that a later plain query of the task writing in the same
  namespace never collides with them; a forward retried after an error reuses its id, so the
  log keeps it once.

Its thread also polls the copy's DPC node (reconciliation, under the registry's permit as
before) and acknowledges the inputs under the task's own consumer name where the copy has
(the failed host's position would otherwise keep the producers' logs from ever being trimmed).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from spark_jobs.runtime.dpc import DPCFragment
from spark_jobs.runtime.host import StreamRef
from spark_jobs.runtime.soutput import NAMESPACE_BITS, leave_out, row_counts
from spark_jobs.runtime.transport import StreamClient, StreamLog

log = logging.getLogger("fedload.agent.promote")

POLL_EVERY_S = 0.2
# Input acknowledgements follow the copy's this often (a Flight round trip per input).
ACK_EVERY_S = 1.0
# Forwarded batches' ids within the epoch's namespace: above any Spark batch id a query of the
# task reaches (soutput.NAMESPACE_BITS), so the spaces never meet.
FORWARD_BASE = 1 << (NAMESPACE_BITS - 1)
CALL_TIMEOUT_S = 2.0


def covers(replay_from: int, failed_boundary: int | None, span: int) -> bool:
    """Whether a copy that computes whole windows from bucket ``replay_from`` on, joined with
    what the failed host emitted (every window ending at or before its output BOUNDARY),
    misses no window: its first window must end at or before that BOUNDARY."""
    return failed_boundary is not None and replay_from + span <= failed_boundary


@dataclass
class Forwarder:
    """Copies the complete buckets of ``copy_stream`` (a local log) into ``output``."""

    local: StreamLog
    copy_stream: str
    output: StreamRef
    epoch: int
    # Rows the failed host already wrote to ``output``, each left out once (precise).
    written_before: Counter[tuple[Any, ...]]
    # First bucket not forwarded yet (None: from the copy log's beginning).
    cursor: int | None = None
    sequence: int = 0
    forwarded_rows: int = 0
    left_out: int = 0
    _pending: tuple[pa.Table, int] | None = None

    def batch_id(self) -> int:
        return (self.epoch << NAMESPACE_BITS) | (FORWARD_BASE + self.sequence)

    def forward(self) -> int:
        """Forward what became complete since the last call; returns the rows appended."""
        if self._pending is None:
            self._pending = self._next()
            if self._pending is None:
                return 0
        table, boundary = self._pending
        with StreamClient(self.output.location, timeout=CALL_TIMEOUT_S) as client:
            if table.num_columns:
                client.append(
                    self.output.stream,
                    table,
                    boundary=boundary,
                    batch_id=self.batch_id(),
                    epoch=self.epoch,
                )
                self.sequence += 1
            else:
                client.advance(self.output.stream, boundary, self.epoch)
        self._pending = None
        self.cursor = boundary
        self.forwarded_rows += table.num_rows
        return table.num_rows

    def _next(self) -> tuple[pa.Table, int] | None:
        """The next complete range, with the failed host's rows left out. Computed once per
        range and kept until appended: ``leave_out`` consumes the count, so a retry after a
        failed append must send the same rows under the same batch id."""
        boundary = self.local.info(self.copy_stream)["boundary"]
        if boundary is None or (self.cursor is not None and boundary <= self.cursor):
            return None
        lo = -(2**62) if self.cursor is None else self.cursor
        schema, batches = self.local.read(self.copy_stream, lo, boundary, strict=False)
        if schema is None:
            return pa.table({}), boundary
        table, dropped = leave_out(
            pa.Table.from_batches(batches, schema=schema), self.written_before
        )
        self.left_out += dropped
        return table, boundary


def failed_host_rows(output: StreamRef) -> tuple[Counter[tuple[Any, ...]], int | None]:
    """The rows in the task's log (the failed host's, fenced out by now) and its BOUNDARY."""
    with StreamClient(output.location, timeout=CALL_TIMEOUT_S) as client:
        table = client.read_table(output.stream)
        boundary = client.info(output.stream)["boundary"]
    return row_counts(table), boundary


@dataclass
class PromotedCopy:
    """A running active copy that is now its task's host (see the module docstring)."""

    task: str
    dpc: DPCFragment
    forwarder: Forwarder
    # The copy's consumer name at the producers, and the task's own.
    copy_consumer: str
    task_consumer: str
    poll_every_s: float = POLL_EVERY_S
    errors: list[str] = field(default_factory=list)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    # Called with a message when a poll step fails (the agent's error list).
    on_error: Callable[[str], None] | None = None

    def start(self) -> None:
        self._forward_pending()  # what the copy wrote before the takeover goes out at once
        self._thread = threading.Thread(target=self._run, name=f"promoted-{self.task}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        since_ack = 0.0
        while not self._stopped.wait(self.poll_every_s):
            try:
                self.dpc.poll()
            except Exception as error:  # a poll across a cut link: the next one may pass
                self._note(f"{self.task}: poll: {type(error).__name__}: {error}")
            self._forward_pending()
            since_ack += self.poll_every_s
            if since_ack >= ACK_EVERY_S:
                since_ack = 0.0
                self._follow_acks()

    def _forward_pending(self) -> None:
        try:
            self.forwarder.forward()
        except Exception as error:  # the owner's endpoint may be away: the next poll retries
            self._note(f"{self.task}: forward: {type(error).__name__}: {error}")

    def _follow_acks(self) -> None:
        for ref in self.dpc.spec.inputs:
            try:
                with StreamClient(ref.location, timeout=CALL_TIMEOUT_S) as client:
                    acked = client.info(ref.stream)["acks"].get(self.copy_consumer)
                    if acked is not None:
                        client.ack(ref.stream, self.task_consumer, int(acked))
            except Exception as error:
                self._note(f"{self.task}: acks on {ref.stream}: {type(error).__name__}: {error}")

    def _note(self, message: str) -> None:
        log.warning("%s", message)
        self.errors = [*self.errors[-49:], message]
        if self.on_error is not None:
            self.on_error(message)
