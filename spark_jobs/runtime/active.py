"""Active replicas in ``fedload agent``: a running DPC copy of a fragment hosted elsewhere.

When a task's owner places an ``active_standby`` replica on this participant (``POST
/v1/tasks/{name}/replicas``), this agent runs the task's fragment itself, beside its primary
host, as a DPC node (``spark_jobs.runtime.dpc.DPCFragment``: SUnion with the delay budget from
the contract's ``max_delay_seconds``, SOutput's UNDO/corrections/REC_DONE, checkpoint/redo).

- It reads the same inputs as the primary (the producers' logs at their owners), acknowledging
  as ``<task>.active.<holder>`` (``active_consumer``): a position of its own, so no copy trims
  what another (the primary, or a second holder's copy) still reads.
- It writes to its own log of the output on its own endpoint, ``<task>.out@<me>``
  (``app.dataplane.streams.replica_stream``), not to the owner's: a consumer reads the copy it
  can reach, so each copy's output must be reachable over that copy's own links.
- It reconciles only under the registry's permit (``/v1/permits/<task>``, asked as this
  participant), so two replicas of a fragment never reconcile at once.
- It answers ``dpc_state`` on the agent's endpoint (scope: read of its log) with its node
  state, which is what a consumer ranks replicas by.

Its clock is the wall clock mapped onto the sources' stime: at start, "now" is set to the
slowest input's boundary (a live producer closes a bucket as its second ends; sources in
different agents started at different moments), so a bucket is released TENTATIVE once its end
is more than the budget behind the wall clock without every BOUNDARY. The budget adapts to the
batch time but stays at least half of X, and the deadlines of its calls derive from X. A
copy starts from empty state at the next window start after the input's newest bucket (as a
``gap`` start): every window it emits from there is whole, and equal to the primary's.

A failover of the task to this participant takes the running copy over (``hand_over``, then
``spark_jobs.runtime.promote``): the copy goes on as the task's host, nothing restarts.

Not yet: the primary host runs its fragment as a plain query (always STABLE to a consumer).
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.availability.states import NodeState
from app.availability.tuples import Kind
from app.dataplane.streams import replica_stream
from app.participant.failover import Keep, align_up, window_span
from app.participant.ports import TaskRecord
from spark_jobs.fragments import catalogue
from spark_jobs.runtime.dpc import DPCFragment, DPCSettings
from spark_jobs.runtime.host import FragmentSpec, StreamRef, only_alternates_differ
from spark_jobs.runtime.transport import StreamClient

if TYPE_CHECKING:
    from spark_jobs.runtime.participant_host import SparkParticipantHost

log = logging.getLogger("fedload.agent.active")

ACTIVE = "active"
# <task>.active (its query's checkpoint), <task>.active.dpc (its DPC state), <task>.active.redo-N.
_COPY_DIRECTORY = re.compile(rf".\.{ACTIVE}(\.dpc|\.redo-\d+)?$")
TECHNIQUE = "active_standby"
# X when the contract names none: Borealis's experiments' 3 s.
DEFAULT_MAX_DELAY_S = 3.0
POLL_EVERY_S = 0.2
INFO_TIMEOUT_S = 2.0
# The adaptive budget's floor, as a share of X (DPCSettings.min_budget_share): half of X. Seen
# without it at loads of 36-65: batches of 2-3 s took the budget to zero, every late bucket of
# a partner's source became a failure, and the redo met tentative input again and again.
MIN_BUDGET_SHARE = 0.5
# The source's planning-path boundary query waits this share of X at most (its default of
# 250 ms failed healthy calls to a partner on a loaded machine, each one "no news" for a
# trigger): the tenth of X that Borealis leaves to processing.
INFO_TIMEOUT_SHARE = 0.1
MIN_INFO_TIMEOUT_MS = 250
# The newest batches dpc_state tells of (two per second: a few minutes).
STATE_BATCHES = 400


def info_timeout_ms(max_delay_seconds: float) -> int:
    """The source's boundary query deadline for a copy under X = ``max_delay_seconds``."""
    return max(MIN_INFO_TIMEOUT_MS, round(INFO_TIMEOUT_SHARE * max_delay_seconds * 1000))


def active_name(task: str) -> str:
    """The copy's name here: its query, checkpoint and the consumer position it acknowledges."""
    return f"{task}.{ACTIVE}"


def active_consumer(task: str, holder: str) -> str:
    """The position the copy on ``holder`` acknowledges at its producers: one per holder. With
    one position shared by every holder's copy, the copy that reconciled first acknowledged past
    the buckets the other's redo had yet to re-read, and the producers trimmed them (two copies
    of O.x: every redo of the second failed with "buckets below ... were acknowledged")."""
    return f"{active_name(task)}.{holder}"


def is_active_copy(fragment: str) -> bool:
    """A checkpoint directory of an active copy (its query's, its DPC state's, a redo's): the
    host's clean-up of fragments hosted elsewhere must leave these to ``ActiveReplicas``."""
    return _COPY_DIRECTORY.search(fragment) is not None


@dataclass
class _Copy:
    task: str
    dpc: DPCFragment
    stream: str
    max_delay_s: float
    started_at: float
    replay_from: int
    # The state last reported to the registry.
    reported: str | None = None


class ActiveReplicas:
    """The active copies this agent runs, kept in line with the registry's replica records."""

    def __init__(self, host: SparkParticipantHost, poll_every_s: float = POLL_EVERY_S) -> None:
        self._host = host
        self._copies: dict[str, _Copy] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._poll_every_s = poll_every_s
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        host.server.actions["dpc_state"] = self._state

    # -- the tick --------------------------------------------------------------------------
    def keep(self, records: Mapping[str, TaskRecord], keeps: list[Keep]) -> None:
        me = self._host.name
        wanted = {
            k.task: k
            for k in keeps
            if k.technique == TECHNIQUE
            and (record := records.get(k.task)) is not None
            and record.real
            and not record.source
            and record.host != me
        }
        with self._lock:
            gone = [task for task in self._copies if task not in wanted]
        for task in gone:
            self._stop(task)
        for task, k in wanted.items():
            with self._lock:
                copy = self._copies.get(task)
            if copy is not None:
                self._report(copy)
                self._follow_copies(records[task])
                continue
            try:
                self._start(records[task], k)
            except Exception as error:  # the next tick tries again
                self._note(f"active copy of {task}: {type(error).__name__}: {error}")

    def state_of(self, task: str) -> NodeState | None:
        with self._lock:
            copy = self._copies.get(task)
        return None if copy is None else copy.dpc.state

    def copy_of(self, task: str) -> _Copy | None:
        """The running copy of ``task`` here, if any (left running and kept)."""
        with self._lock:
            return self._copies.get(task)

    def hand_over(self, task: str) -> _Copy | None:
        """Give up the running copy of ``task`` without stopping it: it became the task's host
        (a failover). From now on its owner polls it and stops it; ``keep`` no longer sees it."""
        with self._lock:
            return self._copies.pop(task, None)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._copies)

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for task in self.running():
            self._stop(task, remove=False)

    # -- internals -------------------------------------------------------------------------
    def _follow_copies(self, record: TaskRecord) -> None:
        """An active copy reads its inputs' own active copies as the registry lists them now,
        as the fragment does (``SparkParticipantHost._follow_copies``)."""
        host = self._host
        spec = host.spec_of(record)
        name = active_name(record.name)
        running = host.runtime.running_spec(name)
        if spec is None or running is None or not host.runtime.is_running(name):
            return
        if only_alternates_differ(running.inputs, spec.inputs):
            try:
                host.runtime.update_alternates(name, spec.inputs)
            except Exception as error:  # the next tick tries again
                self._note(f"alternates of {name}: {type(error).__name__}: {error}")

    def _start(self, record: TaskRecord, k: Keep) -> None:
        host = self._host
        if not host.runtime.has_spark:
            host.warm()  # never inside the tick: the next tick after the JVM is up starts it
            return
        spec = host.spec_of(record)
        if spec is None or not spec.inputs:
            return
        if not _primary_reads(spec, record.name):
            return  # its hold would let the producers trim what the primary has yet to read
        boundary = _slowest_boundary(spec)
        if boundary is None:
            return  # an input has not closed a bucket yet: no clock to map, try next tick
        bucket_ms = round(spec.bucket_seconds * 1000)
        offset_ms = round(time.time() * 1000) - int(boundary) * bucket_ms
        defaults = catalogue.PARAMETERS.get(record.fragment or "", {})
        span = window_span(record.params, defaults, spec.bucket_seconds)
        replay_from = align_up(int(boundary), span)
        stream = replica_stream(record.name, host.name)
        host.server.log.declare(stream, spec.bucket_seconds)
        name = active_name(record.name)
        copy_spec = replace(
            spec,
            name=name,
            output=StreamRef(host.endpoint, stream),
            options={**spec.options, "consumer": active_consumer(record.name, host.name)},
        )
        max_delay = float(k.max_delay_seconds or DEFAULT_MAX_DELAY_S)
        settings = DPCSettings(
            max_delay_seconds=max_delay,
            clock_offset_ms=offset_ms,
            adaptive_budget=True,
            min_budget_share=MIN_BUDGET_SHARE,
            serve_while_reconciling=host.reconcile_mode != "alone",
            stand_down_when_served=host.reconcile_mode == "auto",
            info_timeout_ms=info_timeout_ms(max_delay),
        )
        registry = host.client
        task, me = record.name, host.name

        # The other copies serving by the registry's last permit decision (--reconcile auto).
        serving: list[str] = []

        def request(_fragment: str) -> bool | None:
            try:
                decision = registry.request_permit(task, me)
            except Exception as error:  # not asked: no new permit, a held one's lease runs on
                self._note(f"permit for {task}: {type(error).__name__}: {error}")
                return None
            serving[:] = decision.get("serving", [])
            return bool(decision["granted"])

        def release(_fragment: str) -> None:
            try:
                registry.release_permit(task, me)
            except Exception as error:  # the lease runs out on its own
                self._note(f"permit release for {task}: {type(error).__name__}: {error}")

        dpc = DPCFragment(
            host.runtime,
            copy_spec,
            settings,
            epoch=0,
            request_permission=request,
            release_permission=release,
            others_serving=lambda _fragment: bool(serving),
        )
        dpc.start(replay_from=None if dpc.resumed else replay_from)
        with self._lock:
            self._copies[task] = _Copy(task, dpc, stream, max_delay, time.time(), replay_from)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._poll_loop, name="active-replicas", daemon=True
                )
                self._thread.start()
        log.info(
            "%s: active copy started as %s, X = %s s, reconciling %s",
            task,
            name,
            max_delay,
            host.reconcile_mode,
        )

    def _report(self, copy: _Copy) -> None:
        """Tell the registry the copy's DPC state when it changed (the admin's availability
        page shows it); a consumer asks the copy itself (``dpc_state``), never waiting on this."""
        state = copy.dpc.advertised_state.value
        if state == copy.reported:
            return
        try:
            self._host.client.report_replica_state(copy.task, state)
        except Exception as error:  # the next tick reports again
            self._note(f"state of {copy.task}: {type(error).__name__}: {error}")
            return
        copy.reported = state

    def _stop(self, task: str, *, remove: bool = True) -> None:
        with self._lock:
            copy = self._copies.pop(task, None)
        if copy is None:
            return
        runtime = self._host.runtime
        name = copy.dpc.spec.name
        redo = copy.dpc.sink.redo
        for slot in ([redo.copy] if redo is not None else []) + [name]:
            try:
                runtime.stop(slot)
            except Exception as error:
                self._note(f"stopping {slot}: {type(error).__name__}: {error}")
        if remove:
            for path in runtime.checkpoint_root.glob(f"{name}*"):
                shutil.rmtree(path, ignore_errors=True)
        log.info("%s: active copy stopped", task)

    def _poll_loop(self) -> None:
        while not self._stopped.wait(self._poll_every_s):
            with self._lock:
                copies = list(self._copies.values())
            for copy in copies:
                try:
                    copy.dpc.poll()
                except Exception as error:  # a poll across a cut link: the next one may pass
                    self._note(f"{copy.task}: poll: {type(error).__name__}: {error}")

    def _state(self, body: dict[str, Any]) -> dict[str, Any]:
        stream = str(body["stream"])
        with self._lock:
            copy = next((c for c in self._copies.values() if c.stream == stream), None)
        if copy is None:
            raise KeyError(f"no active copy writes {stream} here")
        sink = copy.dpc.sink
        return {
            "task": copy.task,
            # STABILIZATION while its serving query stands down for a redo: read another copy.
            "state": copy.dpc.advertised_state.value,
            "max_delay_seconds": copy.max_delay_s,
            "replay_from": copy.replay_from,
            "tentative_batches": sink.tentative_batches,
            "tentative_rows": sink.rules.tentative_sent,
            "corrections": sink.rules.corrections_sent,
            "undos": sink.rules.undos_sent,
            "reconciliations": len(copy.dpc.reconciliations),
            # When each reconciliation began (the permit granted) and switched (the UNDO sent),
            # and the node's states with when it entered each: a scenario's report reads them.
            "reconciled": [dict(r) for r in copy.dpc.reconciliations],
            "history": [[state.value, at] for state, at in sink.history],
            "rec_dones": sum(1 for _, m in sink.messages if m.kind is Kind.REC_DONE),
            # Redo copies whose query died before the switch (started again after), and why
            # the poller last failed for this task (a report shows them beside the state).
            "redo_failures": copy.dpc.redo_failures,
            # Redo copies dropped because an input was cut again for X before the switch.
            "redo_recuts": copy.dpc.redo_recuts,
            # Renewals of the permit refused mid-redo (its lease ran out; the redo was dropped).
            "permits_lost": copy.dpc.permit.lost,
            "redo_paused_s": round(copy.dpc.redo_paused_s, 3),
            "notes": [note for note in self.errors if copy.task in note][-5:],
            "budget_ms": copy.dpc.budgets[-1][1] if copy.dpc.budgets else None,
            "min_budget_ms": min((b for _, b in copy.dpc.budgets), default=None),
            # The paper's latency at the node: per batch, one past its last input bucket, whether
            # it went out tentative, and when; "now" on the copy's clock is wall ms - offset.
            "clock_offset_ms": copy.dpc.settings.clock_offset_ms,
            # Bucket numbers to time: bucket b ends at (b + 1) * bucket_ms on the copy's clock.
            "bucket_ms": round(copy.dpc.spec.bucket_seconds * 1000),
            "batches": [
                [b.end_bucket, b.tentative, b.sent_at]
                for b in sink.batches[-STATE_BATCHES:]
                if b.end_bucket is not None
            ],
        }

    def _note(self, message: str) -> None:
        log.warning("%s", message)
        self.errors = [*self.errors[-49:], message]


def _slowest_boundary(spec: FragmentSpec) -> int | None:
    """The smallest boundary among the inputs (None if one has closed no bucket yet).

    The copy's clock is mapped from it: sources in different agents start publishing at
    different moments, so their stimes stand apart by that much for good. Mapped from a faster
    one, the clock runs ahead of the slower input by the gap, and once the gap passes the budget
    every bucket goes tentative without any failure (the slower input is merely as late as it
    always was). Mapped from the slowest, a bucket is due when every input, at its own pace,
    should have closed it."""
    found: list[int] = []
    for ref in spec.inputs:
        with StreamClient(ref.location, timeout=INFO_TIMEOUT_S) as producer:
            boundary = producer.info(ref.stream)["boundary"]
        if boundary is None:
            return None
        found.append(int(boundary))
    return min(found)


def _primary_reads(spec: FragmentSpec, task: str) -> bool:
    """Whether the primary host's query acknowledges on every input (as ``task``).

    The copy holds each input from its replay point, an acknowledgement: with no other consumer
    registered yet, the producer drops every bucket below it, and a primary that starts later
    (its host busy) reads from there. Seen: the primary's first minute of output lost."""
    for ref in spec.inputs:
        with StreamClient(ref.location, timeout=INFO_TIMEOUT_S) as producer:
            if task not in producer.info(ref.stream)["acks"]:
                return False
    return True
