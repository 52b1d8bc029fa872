"""A participant's data plane on Spark: the ``Host`` and ``Mover`` of ``fedload agent``.

One ``FragmentRuntime`` per agent process, with its Flight endpoint listening from the start and
its SparkSession built when the first real fragment starts here. Every tick the node hands over
the registry's records and the host brings what runs here in line with them:

- a fragment task this participant hosts runs as a streaming query, from its checkpoint under
  the data directory when it has one (a restarted agent resumes where it stopped);
- a source task runs in its owner's agent and feeds its output log: the seeded generator, or a
  directory of files, a NATS JetStream stream or Flight publishers (``spark_jobs.sources``);
- the output log of every fragment task this participant owns lives on its endpoint, so the
  output stays put while the fragment moves;
- a local copy of a task that the registry says is hosted elsewhere is dropped, except while a
  movement of it is prepared (this host released it and waits for the registry's outcome).

Moves (``receive``) follow the one movement path between processes: the target asks the source's
endpoint to release the fragment for the registry's prepared movement; the source checks with the
registry that exactly that movement is prepared from it before it stops after its last committed
batch and packs the checkpoint; the target pulls and verifies it, installs it, commits in the
registry (which fences the old host), and starts from the checkpoint's offsets. With
``FEDLOAD_WARM_BUDGET_S`` > 0 a move is a warm hand-off (``spark_jobs.runtime.warm``): the target
first runs a copy of the query from a live snapshot, following the source's batches and writing
nothing, so that after the release and the commit it only switches; stop-and-copy is its
fallback. Off by default until measured (bench/agents/README.md).

Where time is known from the registry only, crashes resolve through it: a target that died before
committing leaves a prepared movement that the registry aborts when its lease expires, and the
source's next tick restarts the fragment it had released; a target that died after committing
restarts it from the installed checkpoint when it comes back; a source that died resumes its
fragment only if the registry still names it the host.

Size: past 600 lines (842 before participants' own work, 974 now) because the host's tick
(``reconcile``), its moves (``receive``/``release_for``) and its own-work hooks (sources, sinks,
measured load, the start gate on empty inputs) all read and write the same per-fragment maps under
one lock. The seams for a split are the own-work hooks (already mostly in ``own_work``,
``sources``, ``sinks`` and ``cpu_load``) and the move protocol (``receive`` and the release
handlers), which would move with the lock they take.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from app.dataplane.streams import replica_stream
from app.dataplane.tokens import load_public_key
from app.participant.client import ApiError, FedloadClient
from app.participant.command import (
    WILDCARDS,
    AgentContext,
    HostFailure,
    advertised_host,
    buckets_per_second,
    parse_address,
)
from app.participant.ports import Host, MovementRecord, Mover, Received, TaskRecord
from spark_jobs import sources
from spark_jobs.fragments import catalogue
from spark_jobs.generators import ConnectionGenerator, RateSchedule, bucket_of, split_buckets
from spark_jobs.runtime import follow
from spark_jobs.runtime.active import is_active_copy
from spark_jobs.runtime.cpu_load import (
    SETTLE_BATCHES,
    SETTLE_SECONDS,
    UNITS_PER_CORE,
    SparkCpuMeter,
)
from spark_jobs.runtime.dataplane import (
    ClientDefaults,
    FlightAuth,
    TlsFiles,
    registry_tokens,
    use_client_defaults,
)
from spark_jobs.runtime.failover import AgentFailover
from spark_jobs.runtime.host import (
    FragmentRuntime,
    FragmentSpec,
    StreamRef,
    only_alternates_differ,
)
from spark_jobs.runtime.movement import Relocation, RemoteHost, relocate
from spark_jobs.runtime.own_work import hosting_of, trigger_seconds
from spark_jobs.runtime.registry_coordinator import PreparedMovementCoordinator, abort_once
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient, StreamServer
from spark_jobs.runtime.warm import (
    WarmSource,
    lease_deadline,
    release_after_first_write,
    warm_budget,
    warm_relocate,
)
from spark_jobs.session import build_session, is_local
from spark_jobs.sinks.writer import SinkWriters

log = logging.getLogger("fedload.agent.host")

# The federation's default boundary interval: a source closes a bucket once a second. Every
# agent of a federation must use the same one (``fedload agent --bucket-seconds``): a log's
# buckets are declared in it and a fragment's windows are counted in it.
BUCKET_SECONDS = 1.0
# At most this many seconds of input per batch, whatever the bucket (a catch-up after a cut
# reads its backlog in batches of this much).
BATCH_SECONDS = 20.0
# A participant's own data is often not live: a directory of last month's files spans days of
# event time, and twenty seconds of it a batch would take a batch per twenty seconds of history
# (a day in 4,320 batches). Its rows per batch are bounded by its source instead (the files a
# trigger reads, the messages a fetch takes).
OWN_WORK_BATCH_SECONDS = 3600.0
# Rows of an own-work fragment's output that its owner's log keeps for ``fedload tail`` and the
# results client once every consumer has them (a few MB at most).
TAIL_ROWS = 10_000
# The seeded generator's default rate, rows per second.
NOMINAL_ROWS_PER_SECOND = 60.0
# How long after a move the first batch at the new host is waited for (downtime), and where
# it is logged: {"movement_id", "first_batch": seconds from the prepared movement's pick-up}.
FIRST_BATCH_WAIT_SECONDS = 120.0
FIRST_BATCHES = "first_batches.jsonl"
# Crash tests pause an agent at a step of a move (FEDLOAD_FAULT_PAUSE=committed, say) and kill it
# there; nothing else sets this.
FAULT_PAUSE_ENV = "FEDLOAD_FAULT_PAUSE"
# Scenarios reach a partner through a fault proxy of their own (FEDLOAD_FAULT_ROUTES=O=grpc://
# 127.0.0.1:7001, say): cutting it cuts this agent's link to that partner alone, where an
# advertised proxy would cut every link into the partner. Nothing else sets this.
FAULT_ROUTES_ENV = "FEDLOAD_FAULT_ROUTES"
# A warm copy given less than this to catch up (the movement's lease nearly gone) would only
# delay the stop-and-copy move it falls back to.
MIN_WARM_WINDOW_S = 3.0


def fault_routes(text: str | None) -> dict[str, str]:
    """``FEDLOAD_FAULT_ROUTES``'s ``NAME=LOCATION[,NAME=LOCATION...]``: the address this agent
    uses for each named partner instead of the endpoint the registry reports."""
    routes: dict[str, str] = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        name, sep, location = (part.strip() for part in entry.partition("="))
        if not sep or not name or not location:
            raise ValueError(f"{FAULT_ROUTES_ENV}: {entry!r} is not NAME=LOCATION")
        if name in routes:
            raise ValueError(f"{FAULT_ROUTES_ENV}: {name} is routed twice")
        routes[name] = location if "://" in location else f"grpc://{location}"
    return routes


class PausePoints:
    """Fault injection for the crash tests: at a named step, write ``paused-<step>`` in the data
    directory and wait until ``resume-<step>`` appears there (or forever: the test kills us).
    A step pauses once when named in ``steps`` (FEDLOAD_FAULT_PAUSE), or, in an agent started
    with FEDLOAD_FAULT_PAUSE set at all (``armed``, say), each time a test armed it by writing
    ``pause-<step>`` in the data directory (a step of a later move)."""

    def __init__(self, directory: Path, steps: str | None) -> None:
        self._directory = directory
        self._steps = {s.strip() for s in (steps or "").split(",") if s.strip()}
        self._armable = steps is not None

    def __call__(self, step: str) -> None:
        armed = self._directory / f"pause-{step}"
        if step not in self._steps and not (self._armable and armed.exists()):
            return
        (self._directory / f"paused-{step}").write_text(str(time.time()))
        resume = self._directory / f"resume-{step}"
        while not resume.exists():
            time.sleep(0.05)
        self._steps.discard(step)
        armed.unlink(missing_ok=True)


@dataclass
class _Publisher:
    """A source task: the seeded generator publishing each bucket as its wall-clock time ends
    (the Borealis sources' boundaries: every 100 ms there, every ``bucket_seconds`` here)."""

    stream: str
    generator: ConnectionGenerator
    seconds: int | None
    location: str
    stopped: threading.Event
    bucket_seconds: float = BUCKET_SECONDS
    published: int = 0

    def run(self) -> None:
        started = time.time()
        per_second = buckets_per_second(self.bucket_seconds)
        with StreamClient(self.location) as client:
            second = 0
            while self.seconds is None or second < self.seconds:
                table = self.generator.second(second)
                rows = dict(split_buckets(table, self.bucket_seconds))
                first = bucket_of(self.generator.second_start_us(second), self.bucket_seconds)
                for index in range(per_second):
                    due = started + second + (index + 1) * self.bucket_seconds
                    if self.stopped.wait(max(0.0, due - time.time())):
                        return
                    # An empty bucket is closed too: its boundary is what a reader waits for.
                    part = rows.get(first + index, table.schema.empty_table())
                    client.append(self.stream, part, boundary=first + index + 1)
                second += 1
                self.published = second


def generator_of(params: Mapping[str, Any]) -> ConnectionGenerator:
    """The seeded generator of a source task's parameters: ``rate`` rows a second, and
    ``rate_after`` from the generator's second ``rate_from`` on when both are given (an input
    that rises mid-run, reproducibly: a reference run regenerates the same rows)."""
    rate = float(params.get("rate", NOMINAL_ROWS_PER_SECOND))
    schedule = RateSchedule.constant(rate)
    if params.get("rate_after") is not None and params.get("rate_from") is not None:
        schedule = RateSchedule(
            ((0.0, rate), (float(params["rate_from"]), float(params["rate_after"])))
        )
    return ConnectionGenerator(
        seed=int(params.get("seed", 7)),
        schedule=schedule,
        scan_rate=float(params.get("scan_rate", 6)),
    )


class SparkParticipantHost:
    def __init__(
        self,
        name: str,
        client: FedloadClient,
        data_dir: Path,
        *,
        listen: str = "127.0.0.1:0",
        advertise: str | None = None,
        spark: Callable[[], SparkSession] | None = None,
        checkpoints: str | Path | None = None,
        accept_fragments: frozenset[str] | None = None,
        units_per_core: float = UNITS_PER_CORE,
        auth: FlightAuth | None = None,
        tls: TlsFiles | None = None,
        bucket_seconds: float = BUCKET_SECONDS,
        reconcile: str = "alongside",
    ) -> None:
        self.name = name
        buckets_per_second(bucket_seconds)  # a bad interval fails here, before anything starts
        self.bucket_seconds = bucket_seconds
        # How the active copies held here reconcile (``fedload agent --reconcile``).
        self.reconcile_mode = reconcile
        # Load units per core of this host that a fragment's Spark jobs keep busy.
        self._units_per_core = units_per_core
        self._cpu: SparkCpuMeter | None = None
        self._run_ids: dict[str, list[str]] = {}
        self._run_started: dict[str, float] = {}
        # Own-work fragments whose inputs have shown data once (``_inputs_started``).
        self._inputs_seen: set[str] = set()
        self._client = client
        self._data_dir = Path(data_dir)
        host, port = parse_address(listen)
        self.server = StreamServer(host, port, advertise, auth=auth, tls=tls)
        self.runtime = FragmentRuntime(
            name,
            spark or (lambda: build_session(app_name=f"fedload-{name}", master="local[2]")),
            checkpoints or self._data_dir / "checkpoints",
            server=self.server,
        )
        # Release, reinstate and retire requests from other agents are checked here against the
        # registry, under the lock that also guards the tick's starts and stops.
        self.server.handler = self
        self._lock = threading.RLock()  # guards the maps; per-fragment locks guard starts/stops
        self._fragment_locks: dict[str, threading.RLock] = {}
        self._accept = accept_fragments
        self._records: dict[str, TaskRecord] = {}
        self._released: dict[str, int] = {}  # fragment -> the prepared movement it was released for
        self._receiving: set[str] = set()
        self._declared: set[str] = set()
        self._publishers: dict[str, sources.Runner] = {}
        self._source_errors: dict[str, str] = {}
        self._endpoints: dict[str, str] = {}
        self._warming: threading.Thread | None = None
        self._pause = PausePoints(self._data_dir, os.environ.get(FAULT_PAUSE_ENV))
        self._routes = fault_routes(os.environ.get(FAULT_ROUTES_ENV))
        # Moves through a warm copy (spark_jobs.runtime.warm); a budget of 0 (the default)
        # moves by stop-and-copy.
        self._warm_budget = warm_budget()
        self._warm_source = WarmSource(self.runtime, self._check_release, self._fragment_lock)
        self.server.actions.update(self._warm_source.actions())
        self.errors: list[str] = []
        # Why Spark cannot run here (no executor from the cluster, say): the next tick ends
        # the agent with it, rather than retrying a start that cannot succeed.
        self.fatal: str | None = None
        # Crash recovery: standbys shipped, upstream backups kept, failovers made (the node
        # finds it here, see command.run_agent).
        self.availability = AgentFailover(self)
        # The sinks of the tasks this participant owns, written here from their output logs.
        self.sinks = SinkWriters(self.server.log, self._data_dir)

    @property
    def endpoint(self) -> str:
        return self.server.location

    # -- what the failover module (spark_jobs.runtime.failover) uses ------------------------
    @property
    def client(self) -> FedloadClient:
        return self._client

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    def spec_of(self, task: TaskRecord) -> FragmentSpec | None:
        return self._spec(task)

    def endpoint_of(self, participant: str) -> str | None:
        return self._endpoint(participant)

    @contextmanager
    def receiving(self, fragment: str) -> Iterator[None]:
        """While a fragment is taken over here, no tick drops its copy or starts it."""
        with self._lock:
            self._receiving.add(fragment)
        try:
            yield
        finally:
            with self._lock:
                self._receiving.discard(fragment)

    def warm(self) -> None:
        """Start Spark in the background (once): a move into a cold agent would otherwise wait
        for a JVM (10-60 s here) before its first batch."""
        with self._lock:
            if self._warming is None or (
                not self._warming.is_alive() and not self.runtime.has_spark
            ):
                self._warming = threading.Thread(
                    target=self._start_spark, name="spark-warm", daemon=True
                )
                self._warming.start()

    def _start_spark(self) -> None:
        try:
            self.runtime.spark  # noqa: B018 - the property builds the session
        except Exception as error:
            self._note(f"Spark did not start: {error}")
            self.fatal = f"Spark did not start: {type(error).__name__}: {error}"

    # -- Host ------------------------------------------------------------------------------
    def reconcile(self, tasks: Sequence[TaskRecord]) -> None:
        if self.fatal is not None:
            raise HostFailure(self.fatal)
        self._endpoints = {}  # read partners' endpoints afresh each tick: an agent may restart
        self._records = {t.name: t for t in tasks}
        for task in tasks:
            if task.owner == self.name and task.real:
                # An application reads its own work's results (``fedload tail``) without being
                # a consumer of the log: the newest rows stay after the consumers' acks.
                keep = TAIL_ROWS if task.work and not task.source else 0
                self._declare(task.output_stream, keep_rows=keep)
        self.sinks.sync(self.name, tasks)
        for task in tasks:
            if task.host != self.name or not task.real:
                continue
            try:
                if task.source:
                    self._publish(task)
                else:
                    # Per fragment: a release of one waits for nothing but that fragment.
                    with self._fragment_lock(task.name):
                        self._ensure_running(task)
            except Exception as error:  # one fragment's trouble must not stop the others
                self._note(f"{task.name}: {type(error).__name__}: {error}")
        self._drop_moved_away()
        self._warm_source.sweep(lambda m: str(self._client.movement(m)["status"]))

    def loads(self, tasks: Sequence[TaskRecord]) -> dict[str, float]:
        return {t.name: self._measured(t) for t in tasks}

    def _fragment_lock(self, fragment: str) -> threading.RLock:
        with self._lock:
            return self._fragment_locks.setdefault(fragment, threading.RLock())

    def close(self) -> None:
        self.availability.close()
        self.sinks.close()
        with self._lock:
            self._stop_publishers()
            for fragment in list(self._running_fragments()):
                try:
                    self.runtime.stop(fragment)
                except Exception as error:
                    log.warning("stopping %s: %s", fragment, error)
            self.runtime.close()

    # -- Mover -----------------------------------------------------------------------------
    def receive(self, movement: MovementRecord) -> Received:
        record = self._record(movement.task)
        if record is None:
            abort_once(self._client, movement.id)
            raise RuntimeError(f"{movement.task} is not visible to {self.name}: cannot run it")
        if not record.real:
            self._client.commit(movement.id, movement.epoch)
            return Received()
        # --accept names catalogue fragments; a task of its owner's own work has none, and its
        # Python distribution is checked when its spec is built.
        refused = record.fragment is not None and record.fragment not in (self._accept or ())
        if self._accept is not None and refused:
            abort_once(self._client, movement.id)
            raise PermissionError(f"{self.name} does not run {record.fragment} fragments")
        spec = self._spec(record)
        source = self._endpoint(movement.source)
        if spec is None or source is None:
            abort_once(self._client, movement.id)
            own = " (or its fragment cannot run here: see the log)" if record.work else ""
            raise RuntimeError(f"no endpoint known for {movement.source} or {record.owner}{own}")
        with self._lock:
            self._receiving.add(record.name)
        began = time.perf_counter()
        warm_until = lease_deadline(time.monotonic(), movement.lease_seconds_left)
        coordinator = PreparedMovementCoordinator(self._client, movement)
        remote = RemoteHost(movement.source, source)
        moved: Relocation
        fallback: str | None = None
        try:
            window = warm_until - time.monotonic()
            if self._warm_budget > 0 and window >= MIN_WARM_WINDOW_S:
                moved = warm_relocate(
                    spec,
                    remote,
                    self.runtime,
                    coordinator=coordinator,
                    follow_path=self._follow_path(record.name),
                    budget_s=self._warm_budget,
                    deadline=warm_until,
                    reason=movement.reason,
                    on_step=self._pause,
                )
                warm, fallback = moved.copy is not None, moved.fallback
                if warm:
                    moved.timings["lag_batches"] = float(moved.lag_batches)
            else:
                if self._warm_budget > 0:
                    fallback = (
                        f"{movement.lease_seconds_left} s left in the movement's lease: "
                        "no time for a warm copy"
                    )
                self._follow_path(record.name).unlink(missing_ok=True)
                moved = relocate(
                    spec, remote, self.runtime, coordinator=coordinator, on_step=self._pause
                )
                warm = False
        finally:
            with self._lock:
                self._receiving.discard(record.name)
        # The first batch at its new host ends the move's downtime; it comes seconds later, so
        # it is waited for beside the tick (which must keep heartbeating) and logged apart.
        if warm:
            self._after_warm_switch(spec, movement.id, began)
        else:
            threading.Thread(
                target=self._record_first_batch,
                args=(movement.id, record.name, began),
                name=f"first-batch-{record.name}",
                daemon=True,
            ).start()
        timings = dict(moved.timings)
        if not warm and self._warm_budget > 0:
            timings["warm_fallback"] = 1.0
            self._note(f"{record.name}: moved by stop-and-copy: {fallback}")
        return Received(state_bytes=moved.checkpoint_bytes, timings=timings)

    def _follow_path(self, fragment: str) -> Path:
        return self._data_dir / "follow" / f"{fragment}.json"

    def _after_warm_switch(self, spec: FragmentSpec, movement: int | None, began: float) -> None:
        """The copy's first own write ends the downtime and frees its inputs' hold."""

        followed = self._follow_path(spec.name)

        def first() -> None:
            # Past the source's last range now: the query plans for itself from here on, also
            # after a restart.
            followed.unlink(missing_ok=True)
            if movement is None:
                return
            line = {"movement_id": movement, "first_batch": time.perf_counter() - began}
            with (self._data_dir / FIRST_BATCHES).open("a") as out:
                out.write(json.dumps(line) + "\n")

        threading.Thread(
            target=release_after_first_write,
            args=(self.runtime, spec, follow.hold(followed)),
            kwargs={"timeout": FIRST_BATCH_WAIT_SECONDS, "on_first": first},
            name=f"first-batch-{spec.name}",
            daemon=True,
        ).start()

    def _record_first_batch(self, movement: int, fragment: str, began: float) -> None:
        deadline = time.perf_counter() + FIRST_BATCH_WAIT_SECONDS
        while time.perf_counter() < deadline:
            try:
                progressed = self.runtime.query(fragment).lastProgress is not None
            except KeyError:
                return  # released again already
            if progressed:
                line = {"movement_id": movement, "first_batch": time.perf_counter() - began}
                with (self._data_dir / FIRST_BATCHES).open("a") as out:
                    out.write(json.dumps(line) + "\n")
                return
            time.sleep(0.01)

    def receive_replica(self, movement: MovementRecord) -> Received:
        # Replicas hosted by agents are the high-availability issue's; here a replica is the
        # registry's record, and committing it is the whole move.
        self._client.commit(movement.id, movement.epoch)
        return Received()

    # -- HostHandler: what another agent may ask of this one --------------------------------
    def _check_release(self, fragment: str, movement: int) -> None:
        record = MovementRecord.from_read(self._client.movement(movement))
        if (record.status, record.source, record.task) != ("prepared", self.name, fragment):
            raise PermissionError(
                f"movement {movement} does not release {fragment} from {self.name} "
                f"(it is {record.status}, moving {record.task} from {record.source})"
            )

    def release_for(self, fragment: str, movement: int) -> PackedCheckpoint:
        self._check_release(fragment, movement)
        if self.availability.serves(fragment):
            # Its state is the DPC copy's checkpoint, which no plain restart elsewhere reads.
            raise RuntimeError(
                f"{fragment} runs here as a promoted active copy, which cannot move yet"
            )
        with self._fragment_lock(fragment):
            self._released[fragment] = movement
            self.runtime.stop(fragment)
        self._pause("released")
        return self.runtime.pack(fragment)

    def reinstate(self, fragment: str, epoch: int) -> None:
        # The target aborted: run it here again once the registry agrees the move is off.
        with self._fragment_lock(fragment):
            self._resolve_release(fragment)
            record = self._records.get(fragment)
            if record is not None and fragment not in self._released:
                self._ensure_running(record)

    def retire(self, fragment: str) -> None:
        with self._fragment_lock(fragment):
            if self._gone(fragment):
                self._released.pop(fragment, None)
                self.runtime.retire(fragment)
                self._follow_path(fragment).unlink(missing_ok=True)

    # -- internals -------------------------------------------------------------------------
    def _note(self, message: str) -> None:
        log.warning("%s", message)
        self.errors = [*self.errors[-49:], message]

    def _record(self, task: str) -> TaskRecord | None:
        try:
            return TaskRecord.from_read(self._client.task(task))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def _endpoint(self, participant: str) -> str | None:
        if participant == self.name:
            return self.endpoint
        if participant in self._routes:
            return self._routes[participant]
        if participant not in self._endpoints:
            try:
                found = self._client.endpoint(participant)
            except ApiError:
                return None
            if found is None:
                return None
            self._endpoints[participant] = found
        return self._endpoints[participant]

    def _declare(self, stream: str, *, keep_rows: int = 0) -> None:
        if stream not in self._declared:
            self.server.log.declare(stream, self.bucket_seconds, keep_rows=keep_rows)
            self._declared.add(stream)

    def _publish(self, task: TaskRecord) -> None:
        """Run a source task here: the seeded generator (the legacy ``fragment: generator`` or
        ``source: {kind: generator}``) as a ``_Publisher``, any other kind as its runner in
        ``spark_jobs.sources``; each feeds the task's log on this endpoint."""
        if task.name in self._publishers:
            return
        # Served here, where it runs, also when its owner is a partner.
        self._declare(task.output_stream)
        source = sources.source_spec(task.work)
        runner: sources.Runner
        if source is None or source.kind == "generator":
            params = task.params if source is None else source.options
            seconds = params.get("seconds")
            runner = _Publisher(
                task.output_stream,
                generator_of(params),
                None if seconds is None else int(seconds),
                self.endpoint,
                threading.Event(),
                bucket_seconds=self.bucket_seconds,
            )
        else:
            if source.kind == "files" and not self.runtime.has_spark:
                self.warm()  # never a JVM start inside a tick: the source starts once it is up
                return
            runner = sources.runner_for(
                source,
                sources.SourceContext(
                    task=task.name,
                    stream=task.output_stream,
                    location=self.endpoint,
                    bucket_seconds=self.bucket_seconds,
                    state_dir=self._data_dir / "sources" / task.name,
                    spark=lambda: self.runtime.spark,
                    on_error=lambda message: self._source_failed(task.name, message),
                ),
            )
        self._publishers[task.name] = runner
        threading.Thread(
            target=self._run_source,
            args=(task.name, runner),
            name=f"source-{task.name}",
            daemon=True,
        ).start()

    def _run_source(self, task: str, runner: sources.Runner) -> None:
        try:
            runner.run()
            failed = getattr(runner, "error", None) is not None
        except Exception as error:
            failed = True
            self._source_failed(task, f"{type(error).__name__}: {error}")
        if failed and not runner.stopped.is_set():
            # A source that could not run (a directory missing, a crash) is tried again at a
            # later tick; one that ended its work (a generator's seconds) stays done.
            with self._lock:
                if self._publishers.get(task) is runner:
                    del self._publishers[task]

    def _source_failed(self, task: str, message: str) -> None:
        """A source that cannot run: said on the task (once per distinct message) and logged."""
        if self._source_errors.get(task) == message:
            return
        self._source_errors[task] = message
        self._note(message)
        report = getattr(self._client, "report_analysis", None)
        if callable(report):
            try:
                report(task, error=message, output_schema=None)
            except Exception as error:  # the registry unreachable: the log has it meanwhile
                log.warning("reporting %s's source error: %s", task, error)

    def _stop_publishers(self) -> None:
        for publisher in self._publishers.values():
            publisher.stopped.set()
        for publisher in self._publishers.values():
            stop = getattr(publisher, "stop", None)
            if callable(stop):
                stop()

    def _spec(self, task: TaskRecord) -> FragmentSpec | None:
        owner = self._endpoint(task.owner)
        if owner is None:
            return None
        # Each input where the registry says its stream is served: the owner's log, or the
        # endpoint of the partner running a source of the owner's.
        served = [
            self._endpoint(by) if by and by != task.owner else owner
            for by in (*task.input_served_by, *[None] * len(task.inputs))[: len(task.inputs)]
        ]
        if None in served:
            return None  # a serving partner has not reported its endpoint yet
        if task.fragment is not None:
            input_kind = next((f for f in task.input_fragments if f), catalogue.GENERATOR)
            build = catalogue.build(task.fragment, task.params)
            input_schema = catalogue.input_schema(input_kind)
        else:
            # SQL or Python: analysed on this host's Spark before it first runs here (not yet
            # while Spark starts: nothing starts then), refused with the reason reported.
            spark = self.runtime.spark if self.runtime.has_spark else None
            own = hosting_of(self, self._client, self.name).fragment(task, spark)
            if own is None:
                return None
            build, input_schema = own.build, own.input_schema
        copies = (*task.input_copies, *[()] * len(task.inputs))[: len(task.inputs)]
        return FragmentSpec(
            name=task.name,
            build=build,
            input_schema=input_schema,
            inputs=tuple(
                StreamRef(str(at), f"{name}.out", self._alternates(name, holders))
                for name, at, holders in zip(task.inputs, served, copies, strict=True)
            ),
            output=StreamRef(owner, task.output_stream),
            bucket_seconds=self.bucket_seconds,
            trigger_seconds=trigger_seconds(task.work),
            max_buckets_per_batch=round(
                (BATCH_SECONDS if task.fragment is not None else OWN_WORK_BATCH_SECONDS)
                / self.bucket_seconds
            ),
        )

    def _alternates(self, task: str, holders: tuple[str, ...]) -> tuple[StreamRef, ...]:
        """The stable logs of ``task``'s active copies whose holders have reported an
        endpoint: the fragment reads a bucket from any of them when the owner's log lacks it (a
        cut link, an owner behind), ``spark_jobs.runtime.sunion``'s replicated inputs."""
        found = []
        for holder in holders:
            endpoint = self._endpoint(holder)
            if endpoint is not None:
                found.append(StreamRef(endpoint, replica_stream(task, holder)))
        return tuple(found)

    def _resolve_release(self, fragment: str) -> None:
        """Forget a release whose movement the registry has decided."""
        movement = self._released.get(fragment)
        if movement is None:
            return
        status = MovementRecord.from_read(self._client.movement(movement)).status
        if status != "prepared":
            del self._released[fragment]

    def _ensure_running(self, task: TaskRecord) -> None:
        if task.name in self._receiving or self.availability.serves(task.name):
            return  # being taken over, or run by the active copy a failover promoted
        self._resolve_release(task.name)
        if task.name in self._released:
            return  # released for a prepared movement: the registry decides where it runs next
        spec = self._spec(task)
        if spec is None:
            return  # the owner's endpoint is not known yet (its agent has not reported)
        if not self.runtime.has_spark:
            # The JVM takes 10-60 s to start: never inside a tick, which must keep heartbeating
            # and trading meanwhile. The fragment starts at the first tick after it is up.
            self.warm()
            return
        if self.runtime.is_running(task.name):
            running = self.runtime.running_spec(task.name)
            if running is not None and running.output == spec.output:
                self._follow_copies(running, spec)
                return
            log.info("%s: the owner's endpoint changed; restarting against it", task.name)
            self.runtime.stop(task.name)
        failure = self.runtime.failure(task.name)
        if failure is not None:
            self._note(f"{task.name} stopped with {failure}; restarting from its checkpoint")
        if task.work and not self._inputs_started(task.name, spec):
            return
        # A failover's restart writes its batch ids in the range of its own epoch.
        sink = self.availability.sink_for(task.name, spec, task.lease_epoch)
        followed = self._follow_path(task.name)
        if follow.lead(followed):
            # A warm copy's checkpoint (the agent restarted, or the copy failed, after the move's
            # commit): run the source's last ranges before planning its own, and this host is
            # the host of record, so it leads.
            spec = replace(spec, options={**spec.options, "follow_file": str(followed)})
            self.runtime.start(spec, epoch=task.lease_epoch, sink=sink)
            self._after_warm_switch(spec, None, time.perf_counter())
            return
        self.runtime.start(spec, epoch=task.lease_epoch, sink=sink)

    def _inputs_started(self, fragment: str, spec: FragmentSpec) -> bool:
        """Whether every input's log holds a bucket or a boundary, so that a fresh query has a
        place to start. A participant's own source starts with its data (a directory read
        once Spark is up, a broker's first fetch), not at a wall-clock second as the generator
        does, and a query started on an empty log starts at bucket 0: from there it would walk
        the empty buckets to the data's event time, an hour of them a batch. A fragment with a
        checkpoint here starts from it whatever its inputs hold."""
        if fragment in self._inputs_seen or self.runtime.store.exists(fragment):
            return True
        for ref in spec.inputs:
            try:
                with StreamClient(ref.location) as client:
                    info = client.info(ref.stream)
            except Exception:  # the log's host is not up yet, or has not declared it
                return False
            if info.get("first") is None and info.get("boundary") is None:
                return False
        self._inputs_seen.add(fragment)
        return True

    def _follow_copies(self, running: FragmentSpec, spec: FragmentSpec) -> None:
        """Give the running fragment its inputs' active copies as the registry lists them now
        (a copy placed, moved or dropped after it started), without a restart: a restart costs
        the query's start, seconds on a busy machine, for a change that needs none."""
        # An input served elsewhere now is not this: as before, the fragment keeps its reads.
        if not only_alternates_differ(running.inputs, spec.inputs):
            return
        if self.runtime.update_alternates(spec.name, spec.inputs):
            log.info(
                "%s: reads its inputs' copies at %s",
                spec.name,
                [[a.location for a in ref.alternates] for ref in spec.inputs],
            )

    def _running_fragments(self) -> list[str]:
        return [f for f in self.runtime.started() if self.runtime.is_running(f)]

    def _drop_moved_away(self) -> None:
        store = self.runtime.store
        local = set(store.fragments())
        local |= set(self.runtime.started())
        for fragment in local:
            if is_active_copy(fragment):
                continue  # an active replica's copy: spark_jobs.runtime.active keeps those
            record = self._records.get(fragment)
            if record is not None and record.host == self.name:
                continue
            if fragment in self._receiving:
                continue
            if fragment in self._released:
                self._resolve_release(fragment)
                if fragment in self._released:
                    continue
            if record is None and not self._gone(fragment):
                continue
            log.info("%s is hosted elsewhere now; dropping the local copy", fragment)
            with self._fragment_lock(fragment):
                self.runtime.retire(fragment)
            store.remove(fragment)
            self._follow_path(fragment).unlink(missing_ok=True)

    def _gone(self, fragment: str) -> bool:
        """A local copy of a task this participant can no longer see: it neither hosts nor owns
        it, so the copy is stale (the task moved on, or was removed)."""
        try:
            lease = self._client.lease(fragment)
        except ApiError as error:
            return error.status in (403, 404)
        return bool(lease["host"] != self.name)

    def _measured(self, task: TaskRecord) -> float:
        """What the fragment costs this host: the executor CPU of its query's jobs per second,
        in load units (``spark_jobs.runtime.cpu_load``). A synthetic task, one not running
        here, or one that ran too briefly to say keeps the load it has."""
        run_id = self.runtime.run_id(task.name)
        if run_id is None or not self.runtime.has_spark:
            if self._cpu is not None:
                self._cpu.forget(task.name)
            return task.load
        if self._cpu is None:
            self._cpu = SparkCpuMeter(self.runtime.spark, units_per_core=self._units_per_core)
        runs = self._run_ids.setdefault(task.name, [])
        if run_id not in runs:
            # A restart here (a failover, a DPC redo adopted) is another run of the same
            # fragment: the window keeps counting across it.
            runs[:] = [*runs[-2:], run_id]
            self._run_started[run_id] = time.monotonic()
        # Settled once its first batches are done: the first reads everything that waited
        # while the query started (after a move, the backlog of its move), seconds of CPU that
        # would read as the fragment's load for a whole window.
        settling = (
            time.monotonic() - self._run_started.get(run_id, 0.0) < SETTLE_SECONDS
            or len(self.runtime.recent_progress(task.name, SETTLE_BATCHES)) < SETTLE_BATCHES
        )
        self._cpu.observe(task.name, runs, settling=settling)
        measured = self._cpu.load(task.name)
        return task.load if measured is None else measured


# A move ships the checkpoint directory whole; Spark keeps 100 batches of offsets, commits and
# state versions by default, so the tar grew move after move (0.5 to 1.3 MB in the benchmark)
# while the live state stayed a few windows. A restart needs only the last committed batch.
# Old state files are deleted by the state store's maintenance, every 60 s by default: a
# fragment that moves more often than that never ran it, and kept every version it wrote.
AGENT_SPARK_CONF = {
    "spark.sql.streaming.minBatchesToRetain": "10",
    "spark.sql.streaming.stateStore.maintenanceInterval": "5s",
}


# On a cluster the executors' share: small, as the fragments are (override with --spark-conf).
CLUSTER_SPARK_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "2",
    "spark.cores.max": "2",
}


def spark_factory(
    name: str,
    master: str | None,
    conf: Mapping[str, str],
    *,
    driver_host: str | None = None,
    bind_address: str | None = None,
) -> Callable[[], SparkSession]:
    """``driver_host``/``bind_address``: where executors reach this agent's driver and the
    interface it listens on (the agent passes its advertised and listen hosts)."""
    master = master or "local[2]"

    def build() -> SparkSession:
        log.info("%s hosts its first fragment: starting Spark (%s)", name, master)
        cluster = {} if is_local(master) else CLUSTER_SPARK_CONF
        return build_session(
            app_name=f"fedload-{name}",
            master=master,
            shuffle_partitions=2,
            extra={**AGENT_SPARK_CONF, **cluster, **conf},
            driver_host=driver_host,
            bind_address=bind_address,
        )

    return build


TOKEN_FILE = "dataplane-tokens.json"


def secure_data_plane(context: AgentContext) -> tuple[FlightAuth, TlsFiles | None]:
    """The agent's side of the authenticated data plane (issue 14, item 5): its endpoint
    accepts only tokens the service signed for it (verified with the service's public key, read
    from the service at start), and its calls carry tokens the registry issues it, kept in
    ``DATA_DIR/dataplane-tokens.json`` for its Spark processes; with TLS, its clients trust
    ``--tls-ca``."""
    options, client = context.options, context.client
    keys = tuple(load_public_key(pem) for pem in client.dataplane_keys())
    spill = Path(options.data_dir) / TOKEN_FILE
    tokens = registry_tokens(client, spill=spill)
    tokens.start()
    tls = None
    if options.tls_cert is not None and options.tls_key is not None:
        tls = TlsFiles(options.tls_cert, options.tls_key, options.tls_ca)
    use_client_defaults(
        ClientDefaults(
            tokens=tokens,
            tls_roots=options.tls_ca.read_bytes() if options.tls_ca is not None else None,
            token_file=str(spill),
            tls_roots_file=str(options.tls_ca) if options.tls_ca is not None else None,
        )
    )
    return FlightAuth(options.participant, keys), tls


def make_host(context: AgentContext) -> tuple[Host, Mover]:
    """``fedload agent``'s data plane: this module's host, as both ``Host`` and ``Mover``."""
    options = context.options
    auth, tls = secure_data_plane(context)
    listen_host, _ = parse_address(options.listen)
    # The driver listens where the agent does; on every interface when the agent does.
    bind = "0.0.0.0" if listen_host in WILDCARDS else listen_host
    host = SparkParticipantHost(
        options.participant,
        context.client,
        options.data_dir,
        listen=options.listen,
        advertise=options.advertise,
        spark=spark_factory(
            options.participant,
            options.spark_master,
            options.spark_conf,
            driver_host=advertised_host(options.listen, options.advertise),
            bind_address=bind,
        ),
        checkpoints=options.checkpoint_dir,
        accept_fragments=options.accept_fragments,
        auth=auth,
        tls=tls,
        bucket_seconds=options.bucket_seconds,
        reconcile=options.reconcile,
    )
    if options.spark_eager:
        host.warm()
    return host, host
