"""What the scenarios through the product that read a replicated fragment share (``partition``
and ``tentative``): placing an active replica and waiting for it, and a consumer of the
fragment's output that runs the one consumer rule (``app.availability.consumer``) over Flight.

The consumer reaches each copy through a ``FlightLink`` (every call with a deadline: across a
dropped link a call without one would wait for the heal), pings each copy for the one failure
detector (``app.availability.detector``), and follows a DPC copy's companion stream
(``<log>.dpc``: tentative rows, UNDO, corrections, REC_DONE) through a ``FlightCompanion``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.flight as flight
from rich.console import Console

from app.availability.consumer import ReplicaConsumer, ReplicaStatus, Row, Sent
from app.availability.detector import FailureDetector, PeerStatus
from app.availability.states import NodeState
from app.availability.tuples import Kind, Message
from app.availability.tuples import Row as DPCRow
from app.dataplane.streams import DPC_SUFFIX, output_stream, replica_stream
from app.dataplane.tokens import READ, Grant
from app.federation.document import FederationDoc
from app.participant.client import FedloadClient
from spark_jobs.ha.faultproxy import CutMode
from spark_jobs.runtime.dataplane import TokenSource
from spark_jobs.runtime.transport import StreamClient, TransferError
from spark_jobs.scenarios.harness import wait_until, waits_so_far
from spark_jobs.scenarios.processes import AgentSettings, Placement, ProcessFederation


def rows(reader: flight.FlightStreamReader) -> list[Row]:
    return [tuple(r.values()) for r in reader.read_all().to_pylist()]


def dpc_state(client: StreamClient, stream: str) -> dict[str, Any]:
    """An active replica's DPC state, asked of the agent that writes ``stream``."""
    found: dict[str, Any] = client.call(
        "dpc_state", Grant(frozenset({READ}), stream=stream), stream=stream
    )
    return found


def location(admin: FedloadClient, participant: str) -> str:
    found = admin.endpoint(participant)
    if found is None:
        raise LookupError(f"{participant} has reported no endpoint yet")
    return found


def port(location: str) -> int:
    return int(location.rsplit(":", 1)[1])


@dataclass(frozen=True)
class RunOptions:
    """What every scenario through the product is run with (partition, tentative and crash
    each extend it and override its defaults)."""

    report_dir: Path = Path("var/reports/demo")
    work: Path | None = None
    database_url: str | None = None
    # The agents' heartbeats to the service (a participant is failed after 3 missed). Generous,
    # because an agent's tick (its heartbeat) waits for Spark, and a loaded machine (two cores
    # shared by a CI run) stretched ticks past 3 x 3 s: the crash scenario's holder then failed
    # a live host over.
    heartbeat_interval: float = 5.0
    startup_timeout_s: float = 600.0


@dataclass(frozen=True)
class ScenarioOptions(RunOptions):
    """What the partition and tentative scenarios' options share: a consumer of the replicated
    fragment and one cut."""

    # The consumer's failure detector: a replica is failed after a ping went unanswered for
    # interval x misses. Wider than Borealis's 100 ms x 3: the pings are answered by the agent's
    # own Flight server, whose process also drives Spark (a loaded CI machine delays it).
    heartbeat_s: float = 0.5
    misses: int = 4
    fail_for_s: float = 6.0
    cut_mode: CutMode = "drop"
    # Output the consumer reads before the cut and after the heal.
    before_cut_s: float = 4.0
    after_heal_s: float = 8.0
    reference_timeout_s: float = 180.0


def scenario_federation(
    doc: FederationDoc,
    options: RunOptions,
    placements: dict[str, Placement],
    prefix: str,
    lease_seconds: float | None = None,
) -> ProcessFederation:
    """The scenario's ``fedload serve`` and agents (not started): the market never moves
    anything (offers once an hour), the replicas are what is measured."""
    work = options.work or Path(tempfile.mkdtemp(prefix=f"fedload-{prefix}-"))
    federation = ProcessFederation(
        doc,
        work,
        database_url=options.database_url,
        admin_key=secrets.token_urlsafe(16),
        heartbeat_interval=options.heartbeat_interval,
        agent_settings=AgentSettings(offer_interval=3600.0),
        placements=placements,
    )
    if lease_seconds is not None:
        federation.lease_seconds = lease_seconds
    return federation


def write_report(report: dict[str, Any], report_dir: Path, console: Console) -> None:
    report.setdefault("waits", waits_so_far())
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    for check, passed in report["checks"].items():
        console.print(f"{'[green]pass[/]' if passed else '[red]FAIL[/]'} {check}")
    console.print(f"report: {report_dir / 'report.json'}")


@dataclass(frozen=True)
class CopyLogs:
    """A replica's log beside the owner's over the buckets both have closed after the
    replica's replay point (its first whole window): they must hold the same rows."""

    boundary: int | None
    replica_rows: list[Row]
    owner_rows: list[Row]

    @property
    def agree(self) -> bool:
        return bool(self.replica_rows) and self.replica_rows == self.owner_rows


def compare_logs(
    owner: tuple[str, str],
    replica: tuple[str, str],
    owner_boundary: int | None,
    replay_from: int,
    tokens: TokenSource,
) -> CopyLogs:
    """``owner`` and ``replica``: (endpoint, stream) of each log."""
    with StreamClient(replica[0], tokens=tokens) as client:
        found = client.info(replica[1])["boundary"]
        boundary = None if found is None else int(found)
        both = min(int(b) for b in (owner_boundary, boundary) if b is not None)
        replica_rows = sorted(rows(client.read(replica[1], replay_from + 1, both)))
    with StreamClient(owner[0], tokens=tokens) as client:
        owner_rows = sorted(rows(client.read(owner[1], replay_from + 1, both)))
    return CopyLogs(boundary, replica_rows, owner_rows)


@dataclass(frozen=True)
class ReplicaSet:
    """A task, its owner (the primary's host, a plain query) and the holders of its active
    replicas (DPC copies, one per holder): where each writes its log of the output."""

    task: str
    owner: str
    holders: tuple[str, ...]
    window_s: int
    # The federation's boundary interval (``fedload agent --bucket-seconds``).
    bucket_seconds: float = 1.0

    @property
    def window_buckets(self) -> int:
        return round(self.window_s / self.bucket_seconds)

    @property
    def holder(self) -> str:
        """The first holder (the one a consumer of the scenarios fails over to)."""
        return self.holders[0]

    @property
    def names(self) -> tuple[str, ...]:
        return (self.owner, *self.holders)

    @property
    def streams(self) -> dict[str, str]:
        return {
            self.owner: output_stream(self.task),
            **{holder: replica_stream(self.task, holder) for holder in self.holders},
        }


def start_active_replica(
    pair: ReplicaSet,
    owner_client: FedloadClient,
    where: Callable[[str], str],
    tokens: TokenSource,
    sources: Callable[[], int],
    startup_timeout_s: float,
    once_writing: Callable[[], object] | None = None,
) -> None:
    """The owner places the active replicas (``POST /v1/tasks/<task>/replicas``, one per
    holder); wait until the primary writes output, each replica is STABLE past its first whole
    window, and the primary has worked through its sources' backlog to within two windows of
    ``sources()`` (the newest bucket every source has closed). ``where(participant)``: the
    endpoint to ask. ``once_writing``: called once the replicas are placed and the primary's log
    holds rows, before the waits for the replicas (what may start while they catch up)."""
    placed = owner_client._call(
        "POST",
        f"/v1/tasks/{pair.task}/replicas",
        json={"k": len(pair.holders), "technique": "active_standby"},
    )
    hosts = sorted(str(r["host"]) for r in placed)
    if hosts != sorted(pair.holders):
        raise RuntimeError(f"{pair.task}'s replicas went to {hosts}, not {sorted(pair.holders)}")
    streams = pair.streams

    def info(name: str) -> dict[str, Any]:
        with StreamClient(where(name), timeout=5.0, tokens=tokens) as client:
            return client.info(streams[name])

    def holder_state(holder: str) -> dict[str, Any]:
        with StreamClient(where(holder), timeout=5.0, tokens=tokens) as client:
            return dpc_state(client, streams[holder])

    wait_until(
        f"{pair.task} to write output at {pair.owner}",
        lambda: info(pair.owner)["rows"] > 0,
        startup_timeout_s,
    )
    if once_writing is not None:
        once_writing()

    def replica_caught_up(holder: str) -> bool:
        state = holder_state(holder)
        boundary = info(holder)["boundary"]
        return (
            state["state"] == NodeState.STABLE.value
            and boundary is not None
            and boundary > int(state["replay_from"]) + pair.window_buckets
            and info(holder)["rows"] > 0
        )

    for holder in pair.holders:
        wait_until(
            f"{holder}'s active replica to write stable output",
            functools.partial(replica_caught_up, holder),
            startup_timeout_s,
        )

    def primary_caught_up() -> bool:
        # The primary starts on its sources' whole logs (its Spark took a minute to start, the
        # sources published meanwhile): latencies before a failure mean something only once it
        # has worked through that backlog.
        return (info(pair.owner)["boundary"] or 0) >= sources() - 2 * pair.window_buckets

    with contextlib.suppress(TimeoutError):
        wait_until(
            f"{pair.owner} to work through its sources' backlog", primary_caught_up, 120, every=1.0
        )


class FlightLink:
    """The consumer's end of its link to one copy of the stream: every call has a deadline,
    because across a dropped link one without would wait for the heal."""

    def __init__(
        self, location: str, stream: str, tokens: TokenSource | None, timeout: float
    ) -> None:
        self.location, self.stream = location, stream
        self._tokens, self._timeout = tokens, timeout
        self._client: StreamClient | None = None

    def _get(self) -> StreamClient:
        if self._client is None:
            self._client = StreamClient(self.location, timeout=self._timeout, tokens=self._tokens)
        return self._client

    def drop(self) -> None:
        # A failed call drops the channel: gRPC keeps a broken one in back-off past the heal.
        if self._client is not None:
            self._client.close()
            self._client = None

    def boundary(self) -> int | None:
        try:
            found = self._get().info(self.stream)["boundary"]
        except flight.FlightError:
            self.drop()
            raise
        return None if found is None else int(found)

    def read(self, lo: int, hi: int) -> Sequence[Row]:
        try:
            return rows(self._get().read(self.stream, lo, hi))
        except flight.FlightError:
            self.drop()
            raise

    def state(self) -> NodeState:
        try:
            return NodeState(dpc_state(self._get(), self.stream)["state"])
        except flight.FlightError:
            self.drop()
            raise
        except TransferError as error:
            # ``StreamClient.call`` wraps Flight's errors: a call that timed out on a loaded
            # machine is the link's failure, as for a read, not the consumer's (seen in CI,
            # 2026-11-26: one "Deadline Exceeded" counted as a consumer error, output exact).
            self.drop()
            if isinstance(error.__cause__, flight.FlightError):
                raise error.__cause__ from None
            raise

    def close(self) -> None:
        self.drop()


class FlightCompanion(FlightLink):
    """The consumer's end towards a DPC copy's companion stream (``<log>.dpc``). Its buckets are
    the seconds the messages were sent in, so each read starts at the bucket of the last message
    seen (it may have more) and the consumer keeps those numbered above ``after``."""

    def __init__(
        self, location: str, stream: str, tokens: TokenSource | None, timeout: float
    ) -> None:
        super().__init__(location, f"{stream}{DPC_SUFFIX}", tokens, timeout)
        self._from_bucket = -(2**62)

    def messages(self, after: int) -> Sequence[Sent]:
        try:
            table = self._get().read_table(self.stream, self._from_bucket)
        except flight.FlightError as error:
            if isinstance(error, flight.FlightServerError) and "unknown" in str(error).lower():
                return []  # nothing sent yet: the copy declares its companion at its first batch
            self.drop()
            raise
        out = []
        for record in table.to_pylist():
            if int(record["seq"]) <= after:
                continue
            kind = Kind(record["kind"])
            row = (
                None
                if record["row_stime_ms"] is None
                else DPCRow(int(record["row_stime_ms"]), str(record["row"]))
            )
            out.append(Sent(int(record["seq"]), Message(kind, row)))
            self._from_bucket = max(self._from_bucket, int(record["stime"].timestamp()))
        return out


class Consumer:
    """Runs the one consumer rule over Flight links: a heartbeat thread per copy (the detector's
    pings: ``info`` on the copy's log, each waited for to the end of the window) and a read
    loop (each copy's state and boundary, the choice, the chosen copy's companion if it runs
    DPC, then complete buckets from it)."""

    def __init__(
        self,
        stream: str,
        links: dict[str, FlightLink],
        pings: dict[str, FlightLink],
        dpc: set[str],
        heartbeat_s: float,
        misses: int,
        companions: dict[str, FlightCompanion] | None = None,
        bucket_ms: int = 1000,
    ) -> None:
        self.links, self.pings, self.dpc = links, pings, dpc
        self.companions = companions or {}
        self.names = tuple(links)
        self.rule = ReplicaConsumer(stream, self.names, next_bucket=0, bucket_ms=bucket_ms)
        self.interval = heartbeat_s
        self.detector = FailureDetector(time.monotonic, interval=heartbeat_s, misses=misses)
        # Per delivered row's key: when the consumer first had it; the keys of the first read
        # (the log's backlog, not live latency).
        self.first_seen: dict[Hashable, float] = {}
        self.first_pull_done = False
        self.backlog: set[Hashable] = set()
        # Per tentative row's stime (ms, its window's end): when the consumer first held one.
        self.tentative_seen: dict[int, float] = {}
        # (wall time, what one companion read changed) for reads that changed something.
        self.followed: list[tuple[float, str, int, int, int]] = []
        self.heard_at: dict[str, list[float]] = {n: [] for n in self.names}
        self.back_at: dict[str, list[float]] = {n: [] for n in self.names}
        self.status_log: list[dict[str, Any]] = []
        self.states: dict[str, str | None] = dict.fromkeys(self.names)
        self.switch_times: list[float] = []
        self.read_errors = dict.fromkeys(self.names, 0)
        self.errors: list[str] = []
        self._status: dict[str, PeerStatus] = {}
        # The last status read of each copy, and whether the detector has it suspect now.
        self.known: dict[str, ReplicaStatus] = {}
        self.suspect: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._heartbeats, args=(n,), daemon=True) for n in self.names
        ]
        self._threads.append(threading.Thread(target=self._read_loop, daemon=True))

    def start(self) -> None:
        with self._lock:
            for name in self.names:
                self.detector.watch(name)
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        for link in (*self.links.values(), *self.pings.values(), *self.companions.values()):
            link.close()

    def _heartbeats(self, name: str) -> None:
        link = self.pings[name]
        while not self._stop.wait(self.interval / 10):
            with self._lock:
                due = self.detector.should_ping(name)
            if not due:
                continue
            try:
                link.boundary()
            except flight.FlightError:
                with self._lock:
                    self.detector.missed(name)
                continue
            with self._lock:
                if self.detector.failed(name):
                    self.back_at[name].append(time.time())
                self.detector.heard(name)
                self.heard_at[name].append(time.time())

    def _statuses(self) -> list[ReplicaStatus]:
        now = time.time()
        out = []
        for name in self.names:
            with self._lock:
                status = self.detector.status(name)
                if self._status.get(name) != status and status in (
                    PeerStatus.FAILED,
                    PeerStatus.ALIVE,
                ):
                    self.status_log.append({"replica": name, "status": str(status), "at": now})
                    self._status[name] = status
            reachable = status is not PeerStatus.FAILED
            known = self.known.get(name)
            state = None if known is None else known.state
            boundary = None if known is None else known.boundary
            if status is PeerStatus.SUSPECT:
                # Silent past the window, not yet verified failed: keep what was known and do
                # not wait on its link (a call across a partition would stall the loop; only
                # the detector decides that it failed).
                pass
            elif reachable:
                link = self.links[name]
                try:
                    # The primary runs a plain query: its output is stable whenever it is read.
                    state = link.state() if name in self.dpc else NodeState.STABLE
                    boundary = link.boundary()
                except flight.FlightError:
                    self.read_errors[name] += 1
            self.states[name] = None if state is None else state.value
            self.known[name] = ReplicaStatus(name, state, reachable, boundary)
            self.suspect[name] = status is PeerStatus.SUSPECT
            out.append(self.known[name])
        return out

    def _follow(self) -> None:
        current = self.rule.current
        if current not in self.companions:
            return
        followed = self.rule.follow(self.companions)
        now = time.time()
        for row in followed.tentative:
            self.tentative_seen.setdefault(row.stime, now)
        if followed.tentative or followed.undos or followed.corrections or followed.rec_dones:
            self.followed.append(
                (now, current, len(followed.tentative), followed.undos, followed.rec_dones)
            )

    def _read_loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                switch = self.rule.choose(self._statuses(), time.time())
                if switch is not None:
                    self.switch_times.append(switch.at)
                before = set(self.rule.delivered)
                if not self.suspect.get(self.rule.current):
                    # The companion first: a stable row pulled after it supersedes what it held.
                    self._follow()
                    self.rule.pull(self.links)
                now = time.time()
                fresh = [k for k in self.rule.delivered if k not in before]
                for key in fresh:
                    self.first_seen[key] = now
                    if not self.first_pull_done:
                        self.backlog.add(key)
                if fresh:
                    self.first_pull_done = True
            except flight.FlightError:
                self.read_errors[self.rule.current] += 1
            except Exception as error:
                self.errors.append(f"{type(error).__name__}: {error}")
