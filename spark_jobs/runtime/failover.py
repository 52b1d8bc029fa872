"""Crash recovery in ``fedload agent``: replicas kept real, and failovers by recovery type.

``app.participant.failover`` decides (which replica, which recovery type, who starts); this
module acts, in the agent that runs it, beside its ``SparkParticipantHost``:

- **primary side**: every ``ship_every_s`` the host ships the checkpoint of each fragment it runs
  to the agent holding the fragment's passive standby, over Flight, as a delta after the first
  whole copy (``shipping.DeltaShipper``), then acknowledges the inputs as ``<task>.standby`` at
  the shipped offset: the producers keep what a restore of that copy replays.
- **holder side**: for a replica whose contract asks ``rollback``, the holder keeps the
  producers' logs as ``<task>.backup``, one window behind what the host acknowledged (upstream
  backup: the logs are kept until this consumer lets them go).
- **failover** (``fail_over``): asked for in the registry (``POST /v1/movements``, reason
  failover: accepted only from the replica's holder while the registry sees the host failed),
  then carried out on the one movement path, ``relocate``: ``AlreadyShipped`` (the standby's
  copy) for precise, ``NoCheckpoint`` with a replay point for gap and rollback. The commit fences
  the failed host's output. Each takeover is logged in ``failovers.jsonl``.
- **failover to a running copy**: when this agent runs an active replica of the task and the
  copy covers every window the failed host had not emitted, the takeover restarts nothing:
  ``RunningCopy`` on the same path, and the copy goes on as the host
  (``spark_jobs.runtime.promote``; its event says ``"path": "running_copy"``). Otherwise it takes
  the restart path above.

A host restarted by a failover from empty state numbers its micro-batches from 0 again, and the
output log drops a batch id it has seen; so a failover's output writes its batch ids in a space
of its own (its epoch's), and a precise one also leaves out the rows the failed host had already
written (it re-computes exactly those from the standby's offsets; the fragment is deterministic).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from app.participant.client import ApiError
from app.participant.failover import (
    Failover,
    Keep,
    Recovery,
    backup_point,
    effective,
    replay_from,
    window_span,
)
from app.participant.ports import MovementRecord, TaskRecord
from spark_jobs.fragments import catalogue
from spark_jobs.runtime.active import TECHNIQUE as ACTIVE_STANDBY
from spark_jobs.runtime.active import ActiveReplicas, active_consumer
from spark_jobs.runtime.host import FragmentSpec, StreamRef
from spark_jobs.runtime.movement import (
    AlreadyShipped,
    MoveAborted,
    NoCheckpoint,
    Relocation,
    RunningCopy,
    relocate,
)
from spark_jobs.runtime.promote import Forwarder, PromotedCopy, covers, failed_host_rows
from spark_jobs.runtime.registry_coordinator import PreparedMovementCoordinator
from spark_jobs.runtime.shipping import DeltaShipper
from spark_jobs.runtime.soutput import SOutput, leave_out, row_counts, write_namespace
from spark_jobs.runtime.standby import (
    SHIP_TIMEOUT_S,
    STANDBY_SHIPMENT,
    committed_offset,
    snapshot_running,
)
from spark_jobs.runtime.transport import StreamClient, StreamServer

if TYPE_CHECKING:
    from spark_jobs.runtime.participant_host import SparkParticipantHost

log = logging.getLogger("fedload.agent.failover")

FAILOVERS = "failovers.jsonl"
SHIP_EVERY_S = 1.0


def standby_consumer(task: str) -> str:
    return f"{task}.standby"


def backup_consumer(task: str) -> str:
    return f"{task}.backup"


def holds_standby(server: StreamServer, fragment: str) -> bool:
    """Whether a standby copy of ``fragment`` sits in this endpoint's inbox."""
    with server._inbox_lock:  # the inbox has no public query; reading it is all this does
        return (fragment, STANDBY_SHIPMENT) in server._inbox


class FailoverOutput(SOutput):
    """SOutput of a fragment restarted by a failover (see the module docstring)."""

    def __init__(
        self,
        location: str,
        stream: str,
        epoch: int,
        *,
        namespace: int,
        written: Counter[tuple[Any, ...]] | None = None,
    ) -> None:
        super().__init__(location, stream, epoch, namespace=namespace)
        # Rows the failed host already wrote, each left out once when computed again here.
        self.written_before = written
        self.left_out = 0

    @classmethod
    def resynced(cls, location: str, stream: str, epoch: int) -> FailoverOutput:
        with StreamClient(location) as client:
            table = client.read_table(stream)
        rows = row_counts(table)
        return cls(location, stream, epoch, namespace=epoch, written=rows)

    def write(self, batch: DataFrame, batch_id: int) -> bool:
        table = batch.toArrow()
        if self.written_before:
            table, dropped = leave_out(table, self.written_before)
            self.left_out += dropped
        with StreamClient(self.location) as client:
            fresh = client.append(
                self.stream,
                table,
                batch_id=self.log_batch_id(batch_id),
                epoch=self.epoch,
            )
        if fresh:
            self.written += 1
        else:
            self.skipped += 1
        return fresh


@dataclass
class _Shipping:
    shipper: DeltaShipper
    holder: str
    location: str
    record: TaskRecord | None = None
    spec: FragmentSpec | None = None
    # The input logs (location, stream) holding the standby's consumer: an alternate that
    # did not answer is held on a later period.
    held: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class AgentFailover:
    """``app.participant.failover.Availability`` for the Spark host of ``fedload agent``."""

    host: SparkParticipantHost
    ship_every_s: float = SHIP_EVERY_S
    errors: list[str] = field(default_factory=list)
    _shipping: dict[str, _Shipping] = field(default_factory=dict)
    # (fragment, location, stream): the input logs holding a fragment's upstream backup.
    _backups_held: set[tuple[str, str, str]] = field(default_factory=set)
    # Fragments this agent took over from empty state: their output's batch id space.
    namespaces: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    # Active replicas (running DPC copies) this agent holds: spark_jobs.runtime.active.
    active: ActiveReplicas | None = None
    # Active copies that became their task's host here by a failover (task -> copy).
    promoted: dict[str, PromotedCopy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for line in self._events():
            self.namespaces[line["task"]] = int(line["namespace"])
        if self.active is None:
            self.active = ActiveReplicas(self.host)

    # -- the tick's upkeep -----------------------------------------------------------------
    def keep(self, tasks: list[dict[str, Any]], keeps: list[Keep], replicas: list[dict]) -> None:
        records = {str(t["name"]): TaskRecord.from_read(t) for t in tasks}
        self._ship_standbys(records, replicas)
        assert self.active is not None
        self.active.keep(records, keeps)
        self._retire_promoted(records)
        for k in keeps:
            record = records.get(k.task)
            if k.recovery == "rollback" and record is not None and record.host != self.host.name:
                self._keep_backup(record)

    def _ship_standbys(self, records: Mapping[str, TaskRecord], replicas: list[dict]) -> None:
        """Name what to ship; a thread of its own ships it, so that a slow ship (a loaded
        machine, a holder cut off) never delays the tick's heartbeat: a host whose heartbeats
        lapse is failed over while alive."""
        wanted = {}
        for r in replicas:
            record = records.get(str(r["task"]))
            if (
                record is None
                or record.host != self.host.name
                or r["host"] == self.host.name
                or r["technique"] != "passive_standby"
                or not self.host.runtime.is_running(record.name)
            ):
                continue
            wanted[record.name] = (record, str(r["host"]))
        with self._lock:
            for gone in set(self._shipping) - set(wanted):
                del self._shipping[gone]
            for name, (record, holder) in wanted.items():
                state = self._shipping.get(name)
                if state is None or state.holder != holder:
                    location = self.host.endpoint_of(holder)
                    if location is None:
                        continue
                    shipper = DeltaShipper(name, STANDBY_SHIPMENT, timeout=SHIP_TIMEOUT_S)
                    state = _Shipping(shipper, holder, location)
                    self._shipping[name] = state
                state.record = record
                # Built here, in the tick: the shipping thread makes no registry calls.
                state.spec = self.host.spec_of(record)
        if wanted and self._thread is None:
            self._thread = threading.Thread(
                target=self._ship_loop, name="standby-shipping", daemon=True
            )
            self._thread.start()

    def _ship_loop(self) -> None:
        while not self._stopped.wait(self.ship_every_s):
            with self._lock:
                due = list(self._shipping.values())
            for state in due:
                if state.record is None or not self.host.runtime.is_running(state.record.name):
                    continue  # stopped or failed: the last shipped copy is the one to restore
                try:
                    self._ship(state.record, state)
                except Exception as error:  # the next period may get through
                    self._note(
                        f"standby of {state.record.name} to {state.holder}: "
                        f"{type(error).__name__}: {error}"
                    )

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=SHIP_TIMEOUT_S)
        if self.active is not None:
            self.active.close()
        for promoted in self.promoted.values():
            promoted.close()

    def serves(self, task: str) -> bool:
        """Whether a promoted active copy runs ``task`` here (the host starts no query for it)."""
        return task in self.promoted

    def _ship(self, record: TaskRecord, state: _Shipping) -> None:
        spec = state.spec
        if spec is None:
            return
        consumer = standby_consumer(record.name)
        # Before the fragment acknowledges past what the first copy will replay. Its inputs'
        # alternates too, and first: the fragment acknowledges there as well (SUnion), and a
        # restore of the copy whose primary input is cut off reads them. One that does not
        # answer is held on a later period; a primary that does not answer stops the period.
        for ref in spec.inputs:
            for alternate in ref.alternates:
                log_of = (alternate.location, alternate.stream)
                if log_of not in state.held and self._at_alternate(
                    record.name, alternate, consumer
                ):
                    state.held.add(log_of)
        for ref in spec.inputs:
            if (ref.location, ref.stream) not in state.held:
                with StreamClient(ref.location, timeout=SHIP_TIMEOUT_S) as client:
                    client.hold(ref.stream, consumer)
                state.held.add((ref.location, ref.stream))
        snapshot = snapshot_running(self.host.runtime, record.name)
        position = committed_offset(snapshot.tree)
        if position is None:
            return
        state.shipper.ship(state.location, snapshot)
        # Only now may the producers trim below the shipped copy's offset.
        point = position[1]
        for ref in spec.inputs:
            with StreamClient(ref.location, timeout=SHIP_TIMEOUT_S) as client:
                client.ack(ref.stream, consumer, point)
            for alternate in ref.alternates:
                if (alternate.location, alternate.stream) in state.held:
                    self._at_alternate(record.name, alternate, consumer, ack=point)

    def _keep_backup(self, record: TaskRecord) -> None:
        spec = self.host.spec_of(record)
        if spec is None:
            return
        span = _span(record, self.host.bucket_seconds)
        consumer = backup_consumer(record.name)
        held = self._backups_held
        try:
            with StreamClient(spec.output.location, timeout=SHIP_TIMEOUT_S) as client:
                emitted = client.info(spec.output.stream)["boundary"]
        except Exception as error:
            # No point to keep from: the logs are still held (they keep everything).
            self._note(f"upstream backup of {record.name}: {type(error).__name__}: {error}")
            emitted = None
        for ref in spec.inputs:
            point = None
            try:
                with StreamClient(ref.location, timeout=SHIP_TIMEOUT_S) as client:
                    if (record.name, ref.location, ref.stream) not in held:
                        client.hold(ref.stream, consumer)
                        held.add((record.name, ref.location, ref.stream))
                    ack = client.info(ref.stream)["acks"].get(record.name)
                    point = None if ack is None else backup_point(int(ack), emitted, span)
                    if point is not None:
                        client.ack(ref.stream, consumer, point)
            except Exception as error:
                self._note(f"upstream backup of {record.name}: {type(error).__name__}: {error}")
            # The alternates keep the same window: the fragment acknowledges there too, and a
            # replay whose primary input is cut off reads them (SUnion). Held even while the
            # primary does not answer (then not acknowledged: no point known).
            for alternate in ref.alternates:
                key = (record.name, alternate.location, alternate.stream)
                if key not in held and self._at_alternate(record.name, alternate, consumer):
                    held.add(key)
                if key in held and point is not None:
                    self._at_alternate(record.name, alternate, consumer, ack=point)

    def _at_alternate(
        self, fragment: str, alternate: StreamRef, consumer: str, *, ack: int | None = None
    ) -> bool:
        """Hold ``consumer`` at an input's alternate log (with ``ack``: acknowledge there);
        False, noted, when that fails: an alternate cut off (the case alternates exist for) or
        whose copy has not begun its log must not stop the standby or backup of the others."""
        try:
            with StreamClient(alternate.location, timeout=SHIP_TIMEOUT_S) as client:
                if ack is None:
                    client.hold(alternate.stream, consumer)
                else:
                    client.ack(alternate.stream, consumer, ack)
        except Exception as error:
            self._note(
                f"{fragment}: alternate {alternate.stream} at {alternate.location}: "
                f"{type(error).__name__}: {error}"
            )
            return False
        return True

    # -- the takeover ----------------------------------------------------------------------
    def fail_over(self, failover: Failover) -> None:
        try:
            self._fail_over(failover)
        except Exception as error:
            # The registry still names the failed host: the next tick plans it again.
            self._note(f"failover of {failover.task}: {type(error).__name__}: {error}")

    def _fail_over(self, failover: Failover) -> None:
        began_wall = time.time()
        record = TaskRecord.from_read(self.host.client.task(failover.task))
        spec = self.host.spec_of(record)
        if spec is None:
            raise RuntimeError(f"no endpoint known for {record.owner}, the owner")
        if self._copy_covers(failover, record, spec):
            self._take_over_running(failover, spec, began_wall)
            return
        holds = holds_standby(self.host.server, failover.task)
        recovery = effective(failover.recovery, holds_checkpoint=holds)
        start = self._replay_point(recovery, spec, _span(record, self.host.bucket_seconds))
        movement = self._request_failover(failover.task)
        if movement is None:
            return
        runtime = self.host.runtime
        if recovery == "precise":
            source: AlreadyShipped | NoCheckpoint = AlreadyShipped(
                failover.failed_host, STANDBY_SHIPMENT
            )
            sink = FailoverOutput.resynced(spec.output.location, spec.output.stream, movement.epoch)
        else:
            source = NoCheckpoint(failover.failed_host)
            # Empty state: no older copy here may be resumed in its place.
            runtime.discard(failover.task)
            sink = FailoverOutput(
                spec.output.location, spec.output.stream, movement.epoch, namespace=movement.epoch
            )
        # Before the commit: a query that does not start at once (ResumeFailed) is started
        # again by the next tick, and must write in this failover's batch id space too.
        self.namespaces[failover.task] = movement.epoch
        try:
            with self.host.receiving(failover.task):
                moved = relocate(
                    spec,
                    source,
                    runtime,
                    replay_from=start,
                    coordinator=PreparedMovementCoordinator(self.host.client, movement),
                    reason="failover",
                    sink=sink,
                )
        except MoveAborted:
            del self.namespaces[failover.task]
            raise
        if runtime.store.local_root is not None:
            # Carried with the checkpoint: a later move of the fragment writes in this space too.
            write_namespace(runtime.checkpoint_dir(failover.task), movement.epoch)
        else:
            self._note(
                f"{failover.task}: checkpoints are not local here; a later move of it writes "
                "plain batch ids"
            )
        self._log_takeover(
            failover, recovery, "restart", movement, moved, began_wall, replay_from=start
        )

    def _log_takeover(
        self,
        failover: Failover,
        recovery: Recovery,
        path: str,
        movement: MovementRecord,
        moved: Relocation,
        began_wall: float,
        **extra: Any,
    ) -> None:
        line = {
            "task": failover.task,
            "from": failover.failed_host,
            "to": self.host.name,
            "recovery": recovery,
            "path": path,
            "asked": failover.recovery,
            "technique": failover.technique,
            "movement_id": movement.id,
            "epoch": moved.epoch,
            "namespace": movement.epoch,
            "timings": moved.timings,
            "began": began_wall,
            "wall": time.time(),
            **extra,
        }
        with (self.host.data_dir / FAILOVERS).open("a") as out:
            out.write(json.dumps(line) + "\n")
        log.info(
            "took %s over from %s (%s, %s)", failover.task, failover.failed_host, recovery, path
        )

    # -- the takeover by a running active copy ---------------------------------------------
    def _copy_covers(self, failover: Failover, record: TaskRecord, spec: FragmentSpec) -> bool:
        """Whether the takeover goes to this agent's running copy: an active replica asked
        to recover precisely (gap and rollback ask no more of it either), whose copy runs here
        and covers what the failed host had not emitted."""
        if failover.technique != ACTIVE_STANDBY or self.active is None:
            return False
        copy = self.active.copy_of(failover.task)
        if copy is None:
            return False
        with StreamClient(spec.output.location, timeout=SHIP_TIMEOUT_S) as client:
            boundary = client.info(spec.output.stream)["boundary"]
        if covers(copy.replay_from, boundary, _span(record, self.host.bucket_seconds)):
            return True
        self._note(
            f"{failover.task}: the active copy starts at bucket {copy.replay_from}, after what "
            f"the failed host emitted (boundary {boundary}): restarting instead"
        )
        return False

    def _request_failover(self, task: str) -> MovementRecord | None:
        """The registry's failover movement of ``task`` to this host; None while the registry
        does not accept it yet (409: the host not yet failed, say)."""
        try:
            made = self.host.client.request_movement(task, self.host.name, "failover")
        except ApiError as error:
            if error.status == 409:
                log.info("failover of %s not (yet) accepted: %s", task, error.detail)
                return None
            raise
        return MovementRecord.from_read(made)

    def _take_over_running(self, failover: Failover, spec: FragmentSpec, began_wall: float) -> None:
        movement = self._request_failover(failover.task)
        if movement is None:
            return
        task = failover.task
        taken: dict[str, Any] = {}

        def take_over(epoch: int) -> None:
            # After the commit's fence: the failed host's rows are final. Read before the copy
            # is handed over, so that a failed read leaves it where the next tick finds it.
            written, _ = failed_host_rows(spec.output)
            assert self.active is not None
            copy = self.active.hand_over(task)
            if copy is None:
                raise RuntimeError(f"the active copy of {task} stopped before the takeover")
            forwarder = Forwarder(self.host.server.log, copy.stream, spec.output, epoch, written)
            promoted = PromotedCopy(
                task,
                copy.dpc,
                forwarder,
                active_consumer(task, self.host.name),
                task,
                on_error=self._note,
            )
            promoted.start()
            taken.update(promoted=promoted, copy_from=copy.replay_from)
            self.promoted[task] = promoted

        # A plain restart of the task here (this agent restarted) writes in this space too.
        self.namespaces[task] = movement.epoch
        try:
            with self.host.receiving(task):
                moved = relocate(
                    spec,
                    RunningCopy(failover.failed_host, take_over),
                    self.host.runtime,
                    coordinator=PreparedMovementCoordinator(self.host.client, movement),
                    reason="failover",
                )
        except MoveAborted:
            del self.namespaces[task]
            raise
        promoted = taken["promoted"]
        self._log_takeover(
            failover,
            "precise",
            "running_copy",
            movement,
            moved,
            began_wall,
            # The copy's first window: it computed everything from there on.
            copy_from=taken["copy_from"],
            copy_state=promoted.dpc.state.value,
            left_out=promoted.forwarder.left_out,
        )

    def _retire_promoted(self, records: Mapping[str, TaskRecord]) -> None:
        """Stop a promoted copy whose task the registry now places elsewhere."""
        for task in list(self.promoted):
            record = records.get(task)
            if record is not None and record.host == self.host.name:
                continue
            promoted = self.promoted.pop(task)
            promoted.close()
            runtime = self.host.runtime
            name = promoted.dpc.spec.name
            redo = promoted.dpc.sink.redo
            for slot in ([redo.copy] if redo is not None else []) + [name]:
                try:
                    runtime.stop(slot)
                except Exception as error:
                    self._note(f"stopping {slot}: {type(error).__name__}: {error}")
            log.info("%s is hosted elsewhere now; its promoted copy stopped", task)

    def _replay_point(self, recovery: Recovery, spec: FragmentSpec, span: int) -> int | None:
        if recovery == "precise":
            return None
        infos = []
        for ref in spec.inputs:
            with StreamClient(ref.location, timeout=SHIP_TIMEOUT_S) as client:
                infos.append(client.info(ref.stream))
        if recovery == "gap":
            newest = min([i["boundary"] for i in infos if i["boundary"] is not None] or [0])
            return replay_from("gap", newest=newest, kept_from=None, span=span)
        kept = [i["acks"].get(backup_consumer(spec.name)) for i in infos]
        firsts = [i["first"] for i in infos if i["first"] is not None]
        # Without a backup held (the holder never saw the task running), what the logs still
        # hold: a window may then be computed from part of its input, and it shows as a loss.
        held = [k for k in kept if k is not None]
        kept_from = min(held) if len(held) == len(kept) else min(firsts or [0])
        return replay_from("rollback", newest=None, kept_from=kept_from, span=span)

    def sink_for(self, fragment: str, spec: FragmentSpec, epoch: int) -> SOutput | None:
        """The output a restart here must use for a fragment this agent took over (None: the
        plain one)."""
        namespace = self.namespaces.get(fragment)
        if namespace is None:
            return None
        return FailoverOutput(spec.output.location, spec.output.stream, epoch, namespace=namespace)

    # -- internals -------------------------------------------------------------------------
    def _events(self) -> Iterator[dict[str, Any]]:
        path = Path(self.host.data_dir) / FAILOVERS
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    yield json.loads(line)

    def _note(self, message: str) -> None:
        log.warning("%s", message)
        self.errors = [*self.errors[-49:], message]


def _span(record: TaskRecord, bucket_seconds: float) -> int:
    defaults = catalogue.PARAMETERS.get(record.fragment or "", {})
    return window_span(record.params, defaults, bucket_seconds)
