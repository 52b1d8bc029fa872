"""``fedload demo --scenario tentative`` through the product: no stable copy of a fragment is
reachable, its active replica goes on tentatively within X and corrects after the heal.

``fedload serve`` and one ``fedload agent`` per participant of ``tentative-federation.yaml``: O
owns and hosts O.x (a stateful fragment) over two sources of its own, O.conns, which runs at O,
and O.far, which runs at T (a source is served where it runs). T holds O.x's active replica (a
DPC copy in T's agent, ``spark_jobs.runtime.active``, writing ``O.x.out@T`` and its companion
``O.x.out@T.dpc``). O's agent listens behind a fault proxy (``spark_jobs.ha.faultproxy``): it
advertises the proxy's address, so every link into O goes through it (T's reads of O.conns, the
consumer's reads of O's log, and O's own calls to its endpoint). The cut holds TCP (a partition);
O, T and every other link keep running.

U holds a second active replica of O.x (its own DPC copy, ``O.x.out@U``; it reads O.far at T and
O.conns at O, as T's copy does), so during the cut both copies go tentative, and after the heal
both ask the registry for the reconciliation permit (``/v1/permits/O.x``): it is granted to one
at a time, so one copy is always STABLE or UP_FAILURE (serving, within X) while the other
reconciles. The consumer reads O and T; U's copy is checked through its own log and state.

During the cut the consumer (``app.availability.consumer``, the one consumer rule, over Flight)
has no STABLE copy: O is unreachable, and T lost O.conns, so once its delay budget passes it
releases buckets with O.far's rows only, TENTATIVE (UP_FAILURE), within X. The consumer switches
to T and holds T's tentative rows. After the heal T reconciles under the registry's permit (redo
from its all-stable checkpoint, UNDO, corrections, REC_DONE) and is STABLE again; the consumer's
stable output, whichever copy it came through, must equal the failure-free output (O's own log:
O's plain query waits for every input, so a cut delays it and never changes it).

Checks (the old tentative report's, plus ``processes``): tentative results during the failure;
the added latency within X (the paper's measure at the node: per input bucket, first processed,
tentatively or stably, minus the bucket's end, above the median before the cut; slack below);
corrected after the heal (UNDO, corrections, REC_DONE, STABLE again, and T's log equals O's over
everything T computed, the failure included); no tentative output before the cut; the consumer's
output equals the reference with nothing lost or duplicated and rows through the replica among
them; every tentative row the consumer held was resolved. And for the two copies: each went
tentative during the cut, corrected after the heal and ends STABLE with its log equal to O's and
its added latency within X; the registry's permit records (its audit log: each grant to a new
holder and each release) show the two reconciliations one after the other, each copy's own
reconciliation inside its permit, and at every moment one copy STABLE or UP_FAILURE.

Size: past 600 lines because the driver, the paper's latency model and the report are still one
module: the latency model (first-processed times per input bucket, the baseline median, the
added latency against X) and the report's checks read the same per-bucket records the driver
collects. The seams for the split are those three: the driver (federation, cut, heal, waits),
the latency measure (pure, over the records) and the report (checks and JSON).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from app.availability.consumer import Row
from app.availability.detector import PeerStatus
from app.availability.states import NodeState
from app.dataplane.streams import output_stream
from app.federation.document import FederationDoc, load_federation
from app.participant.client import FedloadClient
from app.participant.command import RECONCILE_MODES
from spark_jobs.fragments.catalogue import GENERATOR
from spark_jobs.ha.faultproxy import FaultProxy
from spark_jobs.runtime.dataplane import TokenSource, registry_tokens
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.scenarios.harness import running, wait_until
from spark_jobs.scenarios.latency_plot import plot_latencies
from spark_jobs.scenarios.processes import LOOPBACK, Placement, ProcessFederation, free_port
from spark_jobs.scenarios.replicas import (
    Consumer,
    CopyLogs,
    FlightCompanion,
    FlightLink,
    ReplicaSet,
    ScenarioOptions,
    compare_logs,
    dpc_state,
    location,
    rows,
    scenario_federation,
    start_active_replica,
    write_report,
)

FEDERATION = Path(__file__).with_name("tentative-federation.yaml")
OWNER, HOLDER, SECOND, TASK = "O", "T", "U", "O.x"
HOLDERS = (HOLDER, SECOND)
# Each source and the participant whose endpoint serves it (where it runs).
SOURCES = {"O.conns": OWNER, "O.far": HOLDER}
# The Borealis experiments' third input stream (``TentativeOptions.streams``): a source of O's
# run at U, which the cut leaves reachable to both copies, as O.far.
THIRD_SOURCE = ("O.near", SECOND)
WINDOW_S = 2  # O.x's window in tentative-federation.yaml
PAIR = ReplicaSet(TASK, OWNER, HOLDERS, WINDOW_S)
# The copies the consumer reads (U's is checked through its own log and state).
CONSUMED = (OWNER, HOLDER)
# The added-latency check's slack over X: the copy maps stime onto the wall clock from one
# boundary its slowest source reported at start, and a source closes a bucket as its time ends,
# so that mapping is late by up to one bucket; the baseline (a median) does not take it out.
# One bucket: this at the default boundary interval of a second (``latency_limit_s``).
LATENCY_SLACK_S = 1.0


@dataclass(frozen=True)
class TentativeOptions(ScenarioOptions):
    report_dir: Path = Path("var/reports/demo/tentative")
    # Long beside X: the copies go tentative only once their budget has passed (and once the
    # slower source reaches where the cut stopped O.conns), and windows are 2 s.
    fail_for_s: float = 12.0
    # Output the consumer reads once the copies are STABLE again.
    after_heal_s: float = 4.0
    # Both copies, one after the other (a redo took 82 s at load 7-14 with one copy).
    reconcile_timeout_s: float = 420.0
    reference_timeout_s: float = 120.0
    # Also done when a copy never went tentative (a cut shorter than its delay budget, which
    # brings no reconciliation to wait for): see ``copy_settled``. Off, every copy must have
    # reconciled, as a cut well past the budget must bring.
    settle_without_tentative: bool = False
    # Rows per second of each source (O.conns and O.far); None: the federation file's (30). The
    # benchmark's knob for the paper's 1,000-1,500 tuples/s per stream.
    source_rate: int | None = None
    # The Borealis harness's other settings: 3 input streams (a third source at U), boundaries
    # every 100 ms (``fedload agent --bucket-seconds``), X = 3 s (the contracts'
    # max_delay_seconds; None: the federation file's 5 s).
    streams: int = 2
    bucket_seconds: float = 1.0
    max_delay_s: float | None = None
    # Extra Spark settings of every agent (``fedload agent --spark-conf KEY=VALUE``): the
    # benchmark's knob for scheduler experiments (bench/ha/scheduler_pools.py).
    agent_spark_conf: tuple[tuple[str, str], ...] = ()
    # How the copies reconcile (``fedload agent --reconcile``): "alongside" (the serving query
    # goes on beside the redo), "alone" (it stands down, STABILIZATION, for the redo's time) or
    # "auto" (alone when the registry names another copy serving at the grant).
    reconcile: str = "alongside"
    # Copies that reconcile otherwise (holder, mode): one federation then runs both modes side
    # by side, as the CI test does (a second federation would cost minutes).
    reconcile_by_holder: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for holder, mode in self.reconcile_by_holder:
            if holder not in HOLDERS or mode not in RECONCILE_MODES:
                raise ValueError(
                    f"reconcile_by_holder: ({holder!r}, {mode!r}) names no copy of "
                    f"{', '.join(HOLDERS)} or no mode of {', '.join(RECONCILE_MODES)}"
                )

    def reconcile_of(self, holder: str) -> str:
        return dict(self.reconcile_by_holder).get(holder, self.reconcile)

    def sources(self) -> dict[str, str]:
        """Each source of O.x and the participant whose endpoint serves it."""
        return SOURCES | (dict([THIRD_SOURCE]) if self.streams == 3 else {})

    def pair(self) -> ReplicaSet:
        return replace(PAIR, bucket_seconds=self.bucket_seconds)


def run_tentative(options: TentativeOptions, console: Console | None = None) -> dict[str, Any]:
    console = console or Console()
    # O listens on a port of its own and advertises the proxy's: every link into O crosses it.
    if options.streams not in (2, 3):
        raise ValueError(f"streams must be 2 or 3, got {options.streams}")
    o_port = free_port()
    proxy = FaultProxy(o_port)
    common: tuple[str, ...] = ("--spark-eager", "--bucket-seconds", f"{options.bucket_seconds:g}")
    for key, value in options.agent_spark_conf:
        common += ("--spark-conf", f"{key}={value}")

    def reconciling(who: str) -> tuple[str, ...]:
        return (*common, "--reconcile", options.reconcile_of(who))

    placements = {
        OWNER: Placement(
            port=o_port, args=(*reconciling(OWNER), "--advertise", f"{LOOPBACK}:{proxy.port}")
        ),
        **{holder: Placement(args=reconciling(holder)) for holder in HOLDERS},
    }
    doc = load_federation(FEDERATION)
    if options.source_rate is not None:
        doc = with_source_rate(doc, options.source_rate)
    if options.streams == 3:
        doc = with_third_stream(doc)
    if options.max_delay_s is not None:
        doc = with_max_delay(doc, options.max_delay_s)
    fed = scenario_federation(doc, options, placements, "tentative")
    try:
        with running(fed, console) as admin:
            return _run(options, console, fed, admin, proxy)
    finally:
        # Only now: O's own calls to its endpoint cross the proxy until its agent has stopped.
        proxy.close()


def with_source_rate(doc: FederationDoc, rate: int) -> FederationDoc:
    """The federation with every generator's rate set to ``rate`` rows per second."""
    if rate <= 0:
        raise ValueError(f"source_rate must be a positive number of rows per second, got {rate}")
    return replace(
        doc,
        tasks=tuple(
            replace(t, params={**t.params, "rate": rate}) if t.fragment == GENERATOR else t
            for t in doc.tasks
        ),
    )


def with_third_stream(doc: FederationDoc) -> FederationDoc:
    """O.x over three sources: O.conns (at O), O.far (at T) and O.near, run at U."""
    name, at = THIRD_SOURCE
    far = next(t for t in doc.tasks if t.name == "O.far")
    near = replace(far, name=name, host=at, params={**far.params, "seed": 23})
    tasks = []
    for task in doc.tasks:
        if task.name == TASK:
            task = replace(task, inputs=(*task.inputs, name))
        tasks.append(task)
        if task.name == far.name:
            tasks.append(near)
    return replace(doc, tasks=tuple(tasks))


def with_max_delay(doc: FederationDoc, seconds: float) -> FederationDoc:
    """Every contract that hosts a replica with X = ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"max_delay_s must be a positive number of seconds, got {seconds}")
    return replace(
        doc,
        contracts=tuple(
            c
            if c.availability is None
            else replace(c, availability=replace(c.availability, max_delay_seconds=seconds))
            for c in doc.contracts
        ),
    )


def _boundary(where: str, stream: str, tokens: TokenSource) -> int | None:
    with StreamClient(where, timeout=5.0, tokens=tokens) as client:
        found = client.info(stream)["boundary"]
    return None if found is None else int(found)


def _run(
    options: TentativeOptions,
    console: Console,
    fed: ProcessFederation,
    admin: FedloadClient,
    proxy: FaultProxy,
) -> dict[str, Any]:
    tokens = registry_tokens(admin)
    pair = options.pair()
    streams = pair.streams
    bucket_s = options.bucket_seconds

    def sources() -> int:
        # The newest bucket every source has closed (the slowest source's boundary).
        found = [
            _boundary(location(admin, at), output_stream(source), tokens)
            for source, at in options.sources().items()
        ]
        return min(b or 0 for b in found)

    with console.status("O runs O.x; T and U start their active replicas and catch up ..."):
        start_active_replica(
            pair,
            fed.client(OWNER),
            lambda name: location(admin, name),
            tokens,
            sources,
            options.startup_timeout_s,
        )
    processes = fed.processes()
    locations = {name: location(admin, name) for name in pair.names}
    if locations[OWNER] != proxy.location:
        raise RuntimeError(f"O advertises {locations[OWNER]}, not its proxy {proxy.location}")

    def copy_state(holder: str) -> dict[str, Any]:
        with StreamClient(locations[holder], timeout=5.0, tokens=tokens) as client:
            return dpc_state(client, streams[holder])

    def links(timeout: float) -> dict[str, FlightLink]:
        return {
            name: FlightLink(locations[name], streams[name], tokens, timeout) for name in CONSUMED
        }

    # A copy may go tentative while it catches up (on a loaded machine a source's boundary can
    # miss the budget) and reconcile on its own: the measured part begins once both copies are
    # STABLE, and the report counts such start-up episodes apart (``startup_episodes``). Seen
    # at load 13 (session 24): T went UP_FAILURE 95 s before the consumer started, and the
    # checks took it for tentative output before the cut.
    wait_until(
        "both copies STABLE before the measured part",
        lambda: all(copy_state(h)["state"] == NodeState.STABLE.value for h in HOLDERS),
        options.startup_timeout_s,
        every=0.5,
    )
    window = options.heartbeat_s * options.misses
    consumer = Consumer(
        streams[OWNER],
        links(options.heartbeat_s),
        links(window),
        {HOLDER},
        options.heartbeat_s,
        options.misses,
        companions={
            HOLDER: FlightCompanion(locations[HOLDER], streams[HOLDER], tokens, options.heartbeat_s)
        },
        bucket_ms=round(bucket_s * 1000),
    )
    # Where stime stands on the wall clock: a source closes a bucket as its second ends, and the
    # slowest one decides when a bucket is complete (for the consumer's latencies only).
    stime_to_wall = time.time() - float(sources()) * bucket_s
    started = time.time()
    try:
        consumer.start()
        wait_until("the consumer's first rows from O", lambda: consumer.rule.delivered, 120)
        time.sleep(options.before_cut_s)
        console.print(f"cutting every link into {OWNER} ({options.cut_mode})")
        proxy.cut(options.cut_mode)
        failure_at = time.time()
        time.sleep(options.fail_for_s)
        heal_at = time.time()
        proxy.heal()
        console.print(f"healed; {HOLDER}'s and {SECOND}'s copies reconcile under the permit")

        def reconciled() -> bool:
            # Each copy STABLE again after a reconciliation of its own (one at a time: the
            # second waits for the first's permit).
            return all(
                copy_settled(
                    copy_state(holder), failure_at, heal_at, options.settle_without_tentative
                )
                for holder in HOLDERS
            )

        with contextlib.suppress(TimeoutError):
            wait_until(
                f"{HOLDER}'s and {SECOND}'s copies to reconcile",
                reconciled,
                options.reconcile_timeout_s,
                every=0.5,
            )

        def permit_given_back() -> bool:
            # A copy releases the permit after its REC_DONE, a moment after it is STABLE again;
            # the checks read each permit interval's end from the registry's records, so the
            # last release must be there (not left to the pause after the heal).
            return all(
                i["released"] is not None for i in permit_intervals(_permit_records(admin, TASK))
            )

        with contextlib.suppress(TimeoutError):
            wait_until("the permit to be given back", permit_given_back, 60, every=0.5)

        def resolved() -> bool:
            # The consumer's stable output has passed every tentative row it was shown.
            newest = max(consumer.tentative_seen, default=-1) // round(bucket_s * 1000)
            return consumer.rule.next_bucket > newest

        def log_corrected(holder: str) -> bool:
            # A copy's stable log resumes its boundary once STABLE: wait until it passes the
            # last bucket the copy processed tentatively before comparing it. Not the last one
            # it processed: its output boundary is its watermark, a window behind its input,
            # and the copy runs on, so that never held (the wait ran out, 180 s per copy).
            tentative = [int(b[0]) for b in copy_state(holder)["batches"] if b[1]]
            newest = max(tentative, default=0)
            return (_boundary(locations[holder], streams[holder], tokens) or 0) >= newest

        for holder in HOLDERS:
            with contextlib.suppress(TimeoutError):
                wait_until(
                    f"{holder}'s log to pass what it processed tentatively",
                    functools.partial(log_corrected, holder),
                    # At load 20 a copy that reconciled last still trailed its tentative span
                    # 60 s after it was STABLE again (session 27).
                    180,
                    every=1.0,
                )
        with contextlib.suppress(TimeoutError):
            wait_until("the consumer's stable output to pass the failure", resolved, 60)
        time.sleep(options.after_heal_s)
    finally:
        consumer.stop()
    finished_at = time.time()
    states = {holder: copy_state(holder) for holder in HOLDERS}
    registry_replicas = [
        {k: r.get(k) for k in ("task", "host", "technique", "state")} for r in admin.replicas()
    ]
    try:
        permits: list[dict[str, Any]] | str = admin.permits()
    except Exception as error:  # the report says why, the checks do not depend on it
        permits = f"{type(error).__name__}: {error}"
    try:
        permit_records: list[dict[str, Any]] | str = _permit_records(admin, TASK)
    except Exception as error:  # the check below then fails, saying why
        permit_records = f"{type(error).__name__}: {error}"
    read_upto = consumer.rule.next_bucket
    with contextlib.suppress(TimeoutError):
        wait_until(
            "O's log to reach what the consumer read",
            lambda: (_boundary(locations[OWNER], streams[OWNER], tokens) or 0) >= read_upto,
            options.reference_timeout_s,
            every=1.0,
        )
    with StreamClient(locations[OWNER], tokens=tokens) as client:
        found = client.info(streams[OWNER])["boundary"]
        o_boundary = None if found is None else int(found)
        upto = min(read_upto, o_boundary or 0)
        reference = sorted(rows(client.read(streams[OWNER], -(2**62), upto)))
    logs = {
        holder: compare_logs(
            (locations[OWNER], streams[OWNER]),
            (locations[holder], streams[holder]),
            o_boundary,
            int(states[holder]["replay_from"]),
            tokens,
        )
        for holder in HOLDERS
    }
    report = _report(
        options,
        consumer,
        processes,
        reference,
        states[HOLDER],
        failure_at=failure_at,
        heal_at=heal_at,
        started=started,
        compared_below=upto,
        stime_to_wall=stime_to_wall,
        replica_rows=len(logs[HOLDER].replica_rows),
        replicas_agree=logs[HOLDER].agree,
        boundaries={OWNER: o_boundary, HOLDER: logs[HOLDER].boundary},
    )
    report["proxy_stats"] = asdict(proxy.stats)
    report["registry_replicas"] = registry_replicas
    report["permits"] = permits
    latencies = _two_copies(
        report,
        states,
        logs,
        permit_records,
        started=started,
        failure_at=failure_at,
        heal_at=heal_at,
        finished_at=finished_at,
    )
    options.report_dir.mkdir(parents=True, exist_ok=True)
    plot = plot_latencies(
        options.report_dir / "latency.png",
        latencies,
        started=started,
        failure_at=failure_at,
        heal_at=heal_at,
        max_delay_s=float(states[HOLDER]["max_delay_seconds"]),
        reconciliations={h: c["reconciliations"] for h, c in report["copies"].items()},
    )
    report["plots"] = [plot.name]
    write_report(report, options.report_dir, console)
    return report


def copy_settled(
    state: dict[str, Any], failure_at: float, heal_at: float, without_tentative: bool
) -> bool:
    """Whether a copy is done with the cut: STABLE after a reconciliation of its own; or, with
    ``without_tentative``, STABLE, never UP_FAILURE since the cut, and with a stable batch past
    every bucket that ended by the heal plus X (a bucket of the cut would have gone tentative by
    then: the budget is below X)."""
    if state["state"] != NodeState.STABLE.value:
        return False
    if int(state["reconciliations"]) > 0:
        return True
    if not without_tentative:
        return False
    history = state.get("history", [])
    if any(name == NodeState.UP_FAILURE.value and float(at) >= failure_at for name, at in history):
        return False
    # A batch's end is one past its last input bucket; bucket b ends at (b + 1) * the bucket
    # + offset (wall).
    offset_s, bucket_s = float(state["clock_offset_ms"]) / 1000, bucket_seconds(state)
    past = heal_at + float(state["max_delay_seconds"])
    return any(
        not tentative and bucket_end(int(end) - 1, bucket_s, offset_s) >= past
        for end, tentative, _ in state["batches"]
    )


def bucket_end(bucket: int, bucket_s: float, offset_s: float) -> float:
    """When a copy's input bucket ended on the wall clock (its clock mapped back)."""
    return (bucket + 1) * bucket_s + offset_s


def bucket_seconds(state: dict[str, Any]) -> float:
    """A copy's boundary interval (states from before it was reported: one second)."""
    return float(state.get("bucket_ms", 1000)) / 1000


def node_latencies(holder: dict[str, Any]) -> dict[int, tuple[float, bool]]:
    """The paper's latency at the copy, per input bucket: the first batch that processed it
    (tentatively or stably) sent its output this many seconds after the bucket's end on the
    copy's clock; and whether that batch was tentative."""
    offset_s, bucket_s = float(holder["clock_offset_ms"]) / 1000, bucket_seconds(holder)
    first: dict[int, tuple[float, bool]] = {}
    previous_end: int | None = None
    for end, tentative, sent_at in sorted(holder["batches"], key=lambda b: float(b[2])):
        end = int(end)
        lo = end - 1 if previous_end is None else previous_end
        for bucket in range(lo, end):
            if bucket not in first:
                first[bucket] = (
                    float(sent_at) - bucket_end(bucket, bucket_s, offset_s),
                    bool(tentative),
                )
        previous_end = end if previous_end is None else max(previous_end, end)
    return first


@dataclass(frozen=True)
class CopyLatency:
    """The paper's added latency at one copy: per input bucket, first processed (tentatively or
    stably) minus its end, above the median before the cut; buckets the copy processed before
    the consumer started (its start-up) left out."""

    live: dict[int, tuple[float, bool]]
    offset_s: float
    baseline: float | None
    worst: float | None
    bucket_s: float = 1.0

    def ends_at(self, bucket: int) -> float:
        """When ``bucket`` ended on the wall clock (the copy's clock mapped back)."""
        return bucket_end(bucket, self.bucket_s, self.offset_s)

    @classmethod
    def of(
        cls,
        holder: dict[str, Any],
        started: float,
        failure_at: float,
        *,
        alone: bool | None = None,
    ) -> CopyLatency:
        """``alone``: the copy reconciled Borealis's way (``fedload agent --reconcile alone``,
        or ``auto`` with another copy serving; None: as its own record of its redos says):
        buckets it first sent during a stand-down (``stood_down``: in its redo's batches at the
        switch) are left out, as the other copy's to serve."""
        if alone is None:
            alone = stood_down_for_a_redo(holder)
        per_bucket = node_latencies(holder)
        offset_s, bucket_s = float(holder["clock_offset_ms"]) / 1000, bucket_seconds(holder)

        def ends_at(bucket: int) -> float:
            return bucket_end(bucket, bucket_s, offset_s)

        before = [
            lat
            for bucket, (lat, _) in per_bucket.items()
            if started <= ends_at(bucket) < failure_at
        ]
        periods = stood_down(holder) if alone else []

        def left_to_the_other(bucket: int, latency: float) -> bool:
            sent_at = ends_at(bucket) + latency
            return any(lo < sent_at <= hi for lo, hi in periods)

        live = {
            b: v
            for b, v in per_bucket.items()
            if ends_at(b) >= started and not left_to_the_other(b, v[0])
        }
        return cls(
            live,
            offset_s,
            statistics.median(before) if before else None,
            max((lat for lat, _ in live.values()), default=None),
            bucket_s,
        )

    @property
    def added(self) -> float | None:
        return None if self.baseline is None or self.worst is None else self.worst - self.baseline

    @property
    def tentative_buckets(self) -> list[int]:
        return sorted(b for b, (_, tentative) in self.live.items() if tentative)


def stabilizations(history: list[list[Any]]) -> list[tuple[float, float]]:
    """(began, ended) of each STABILIZATION a copy advertised, wall seconds: from its first
    entry (a copy reconciling alone enters it at its stand-down and again at its switch) to the
    next other state; one still on at the end runs to infinity."""
    periods: list[tuple[float, float]] = []
    began: float | None = None
    for name, at in history:
        if name == NodeState.STABILIZATION.value:
            if began is None:
                began = float(at)
        elif began is not None:
            periods.append((began, float(at)))
            began = None
    if began is not None:
        periods.append((began, float("inf")))
    return periods


def stood_down_for_a_redo(holder: dict[str, Any]) -> bool:
    """Whether the copy stopped serving for one of its redos (by its own record: ``alone``
    always, ``auto`` when the registry named another copy serving)."""
    return any(r.get("stood_down") for r in holder.get("reconciled", []))


def stood_down(holder: dict[str, Any]) -> list[tuple[float, float]]:
    """When a copy reconciling alone did not serve: its STABILIZATION periods, from each
    stand-down to STABLE again (or UP_FAILURE when its redo was dropped). Buckets it had not sent
    when it stood down first leave in its redo's batches at the switch; the consumer read the
    other copy meanwhile, so their first version is the other copy's (``CopyLatency.of``)."""
    return stabilizations(holder.get("history", []))


def first_version_latency(
    copies: list[CopyLatency], started: float, failure_at: float
) -> dict[str, Any]:
    """The added latency of each bucket's first version from any copy: per input bucket, the
    earliest of the copies' latencies, above the median of the same before the cut. What a
    consumer reading whichever copy is ahead gets (DPC's: a copy that reconciles leaves the
    consumer to the other), and a lower bound for one that pays for its switches."""
    best: dict[int, float] = {}
    ends: dict[int, float] = {}
    for copy in copies:
        for bucket, (latency, _tentative) in copy.live.items():
            if bucket not in best or latency < best[bucket]:
                best[bucket] = latency
            ends.setdefault(bucket, copy.ends_at(bucket))
    before = [lat for bucket, lat in best.items() if started <= ends[bucket] < failure_at]
    if not before or not best:
        return {"baseline_latency_ms": None, "max_added_latency_ms": None, "worst_end_ms": None}
    baseline = statistics.median(before)
    worst = max(best, key=lambda bucket: best[bucket])
    return {
        "baseline_latency_ms": round(baseline * 1000, 1),
        "max_added_latency_ms": round((best[worst] - baseline) * 1000, 1),
        "worst_end_ms": round((ends[worst] - started) * 1000),
    }


def _stabilizations(history: list[list[Any]], started: float) -> list[list[int | None]]:
    """[began, ended] of each STABILIZATION, in ms since the consumer started."""

    def ms(at: float) -> int | None:
        return None if at == float("inf") else round((at - started) * 1000)

    return [[ms(began), ms(ended)] for began, ended in stabilizations(history)]


def _report(
    options: TentativeOptions,
    consumer: Consumer,
    processes: dict[str, int],
    reference: list[Row],
    holder: dict[str, Any],
    *,
    failure_at: float,
    heal_at: float,
    started: float,
    compared_below: int,
    stime_to_wall: float,
    replica_rows: int,
    replicas_agree: bool,
    boundaries: dict[str, Any],
) -> dict[str, Any]:
    rule = consumer.rule
    max_delay_s = float(holder["max_delay_seconds"])

    def ms(at: float) -> int:
        return round((at - started) * 1000)

    latency = CopyLatency.of(holder, started, failure_at)
    live, tentative_buckets = latency.live, latency.tentative_buckets
    baseline, worst, added = latency.baseline, latency.worst, latency.added
    # At the consumer: per window end, when it first held a row of it (tentative or stable),
    # minus the end on the wall clock (rows of its first read, the log's backlog, left out).
    window_seen: dict[int, float] = defaultdict(lambda: float("inf"))
    for key, seen in consumer.first_seen.items():
        if key not in consumer.backlog:
            end = int(rule.delivered[key].row[0].timestamp())
            window_seen[end] = min(window_seen[end], seen)
    for stime_ms, seen in consumer.tentative_seen.items():
        end = stime_ms // 1000
        window_seen[end] = min(window_seen[end], seen)
    window_latency = {end: seen - end - stime_to_wall for end, seen in window_seen.items()}
    window_before = [v for end, v in window_latency.items() if end + stime_to_wall < failure_at]
    window_baseline = statistics.median(window_before) if window_before else None

    def window_added(lo: float, hi: float) -> float | None:
        inside = [v for end, v in window_latency.items() if lo <= end + stime_to_wall < hi]
        if window_baseline is None or not inside:
            return None
        return max(inside) - window_baseline

    history = since(holder.get("history", []), started)
    tentative_at = [float(at) for state, at in history if state == NodeState.UP_FAILURE.value]
    output = rule.output()
    # compared_below is a bucket of the log: rows whose stime lies before its start.
    below_s = compared_below * latency.bucket_s
    compared = [r for r in output if r[0].timestamp() < below_s]
    missing = set(reference) - set(compared)
    via_replica = sum(
        1 for d in rule.delivered.values() if d.replica == HOLDER and d.row[0].timestamp() < below_s
    )
    held_at_end = sum(len(rows) for rows in rule.held.values())
    switched_to_replica = any(
        s.to_replica == HOLDER and failure_at <= s.at < heal_at for s, _ in rule.switches
    )
    reconciled = [r for r in holder.get("reconciled", []) if float(r["began"]) >= started]
    switches = [
        {
            "from": s.from_replica,
            "to": s.to_replica,
            "at_ms": ms(s.at),
            "version": s.version,
            "resume_bucket": resume,
        }
        for s, resume in rule.switches
    ]

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 1)

    report: dict[str, Any] = {
        "scenario": "tentative",
        "engine": "agents",
        "through": "fedload serve + fedload agent processes",
        "processes": processes,
        "cut_mode": options.cut_mode,
        "reconcile": options.reconcile,
        "reconcile_by_copy": {h: options.reconcile_of(h) for h in HOLDERS},
        "cut": f"every link into {OWNER} (its agent advertises a fault proxy)",
        "failure_at_ms": ms(failure_at),
        "heal_at_ms": ms(heal_at),
        "max_delay_ms": round(max_delay_s * 1000),
        "budget": {"last_ms": holder.get("budget_ms"), "min_ms": holder.get("min_budget_ms")},
        "switches": switches,
        # What the copy sent (its DPC counters) and what the consumer received of it.
        "tentative_tuples": int(holder.get("tentative_rows", 0)),
        "tentative_batches": int(holder.get("tentative_batches", 0)),
        # Input buckets first processed tentatively: during the cut, and after the heal until
        # the switch (the state has diverged, so every batch is tentative until then).
        "tentative_buckets": len(tentative_buckets),
        "tentative_buckets_before_heal": sum(
            1 for b in tentative_buckets if latency.ends_at(b) < heal_at
        ),
        # Tentative rows the consumer first held before the heal.
        "tentative_before_heal": sum(n for at, _, n, _, _ in consumer.followed if at < heal_at),
        "corrections": int(holder.get("corrections", 0)),
        "undos": int(holder.get("undos", 0)),
        "rec_dones": int(holder.get("rec_dones", 0)),
        "consumer": {
            "tentative_received": rule.tentative_received,
            "undos": rule.undos,
            "undone": rule.undone,
            "superseded": rule.superseded,
            "corrections": rule.corrections,
            "rec_dones": rule.rec_dones,
            "held_at_end": held_at_end,
            "first_tentative_ms": ms(min(consumer.tentative_seen.values()))
            if consumer.tentative_seen
            else None,
        },
        "stabilizations": {HOLDER: _stabilizations(history, started)},
        "history": {HOLDER: [[state, ms(float(at))] for state, at in history]},
        "startup_episodes": {HOLDER: startup_episodes(holder, started)},
        "reconciliations": [
            {k: ms(float(v)) for k, v in r.items() if k in ("began", "redo_started", "switched")}
            for r in reconciled
        ],
        "final_state": holder.get("state"),
        "redo_failures": holder.get("redo_failures"),
        "replica_notes": holder.get("notes"),
        "baseline_latency_ms": rounded(baseline),
        "max_latency_ms": rounded(worst),
        "max_added_latency_ms": rounded(added),
        # Where the worst one lies: its end on the copy's clock (ms since the consumer started)
        # and whether its first processing was tentative.
        "worst_bucket": None
        if not live
        else {
            "end_ms": ms(latency.ends_at(w := max(live, key=lambda b: live[b][0]))),
            "tentative": live[w][1],
        },
        "latency_slack_ms": round(latency_limit_s(0.0, latency.bucket_s) * 1000),
        "consumer_latency": {
            "baseline_ms": rounded(window_baseline),
            "max_added_during_failure_ms": rounded(window_added(failure_at, heal_at)),
            "max_added_after_heal_ms": rounded(window_added(heal_at, float("inf"))),
        },
        "input_duplicates": len(rule.duplicates),
        "rows_out": len(output),
        "reference_rows": len(reference),
        "rows_by_version": rule.rows_by_version(),
        "compared_below_bucket": compared_below,
        "rows_compared": len(compared),
        "rows_compared_via_replica": via_replica,
        "switched_to_replica_during_cut": switched_to_replica,
        "replica_rows_compared": replica_rows,
        "difference": {"missing": len(missing), "extra": len(set(compared) - set(reference))},
        "replica_status_log": [
            {"replica": e["replica"], "status": e["status"], "at_ms": ms(e["at"])}
            for e in consumer.status_log
        ],
        "false_suspicions": sum(
            1
            for e in consumer.status_log
            if e["status"] == PeerStatus.FAILED and (e["replica"] != OWNER or e["at"] < failure_at)
        ),
        "read_errors": consumer.read_errors,
        "consumer_errors": consumer.errors[-20:],
        "log_boundaries": boundaries,
        "detector": {"interval_ms": round(options.heartbeat_s * 1000), "misses": options.misses},
    }
    limit_s = latency_limit_s(max_delay_s, latency.bucket_s)
    report["checks"] = {
        # Evidence that the consumer used the replica: stable rows through it, or a switch to
        # it during the cut. On a loaded machine (CI, load 18, 2026-11-27) T's stable log lagged
        # the consumer's position for the whole cut, so the consumer switched to T, held its
        # tentative rows and switched back at the heal without a stable row from it.
        "output_matches_reference": bool(reference)
        and compared == reference
        and (via_replica > 0 or switched_to_replica),
        "tentative_results_during_failure": report["tentative_tuples"] > 0
        and report["tentative_before_heal"] > 0,
        "no_tentative_before_cut": bool(tentative_at) and min(tentative_at) >= failure_at,
        "added_latency_within_max_delay": added is not None and added <= limit_s,
        "corrected_after_heal": report["undos"] >= 1
        and report["corrections"] > 0
        and report["rec_dones"] >= 1
        and holder.get("state") == NodeState.STABLE.value,
        # T's corrected log equals O's, and reaches past every bucket it sent tentatively.
        "replica_log_corrected": replicas_agree
        and bool(tentative_buckets)
        and int(boundaries[HOLDER] or 0) > tentative_buckets[-1],
        "tentative_rows_resolved": rule.tentative_received > 0 and held_at_end == 0,
        "no_duplicates": not rule.duplicates and len(output) == len(set(output)),
        "no_losses": not missing,
        "consumer_loop_without_errors": not consumer.errors,
    }
    report["ok"] = all(report["checks"].values())
    return report


def latency_limit_s(max_delay_s: float, bucket_s: float = 1.0) -> float:
    """X plus one bucket's slack (see ``LATENCY_SLACK_S``)."""
    return max_delay_s + LATENCY_SLACK_S * bucket_s


def _permit_records(admin: FedloadClient, fragment: str) -> list[dict[str, Any]]:
    """The registry's record of the fragment's permit: its audit entries (a grant to a new
    holder, and each release; renewals write none), oldest first."""
    found: list[dict[str, Any]] = []
    cursor: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 500} | ({} if cursor is None else {"cursor": cursor})
        page = admin._call("GET", "/v1/audit", params=params)
        for entry in page["items"]:
            detail = entry.get("detail") or {}
            if entry["entity_type"] != "permit" or detail.get("fragment") != fragment:
                continue
            found.append(
                {
                    "id": int(entry["id"]),
                    "action": str(entry["action"]),
                    "at": datetime.fromisoformat(str(entry["at"])).timestamp(),
                    "replica": str(detail.get("replica")),
                    "fence": detail.get("fence"),
                }
            )
        cursor = page.get("next_cursor")
        if cursor is None:
            return sorted(found, key=lambda r: int(r["id"]))


def permit_intervals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Who held the permit from when (granted) to when (released; None: never released, its
    lease ran out), from the registry's records oldest first. A grant to the same replica with
    no release in between (its lease ran out and nobody else asked) continues its interval."""
    intervals: list[dict[str, Any]] = []
    for record in records:
        last = intervals[-1] if intervals else None
        if record["action"] == "permit.granted":
            if (
                last is not None
                and last["replica"] == record["replica"]
                and last["released"] is None
            ):
                continue
            intervals.append(
                {
                    "replica": record["replica"],
                    "fence": record["fence"],
                    "granted": record["at"],
                    "released": None,
                }
            )
        elif record["action"] == "permit.released":
            for interval in reversed(intervals):
                if interval["replica"] == record["replica"] and interval["released"] is None:
                    interval["released"] = record["at"]
                    break
    return intervals


def intervals_overlap(intervals: list[dict[str, Any]]) -> bool:
    """Whether a holder's interval had not ended (released) when the next holder's began: the
    permit went to another copy by the lease's expiry while the first may still reconcile."""
    return any(
        a["released"] is None or a["released"] > b["granted"]
        for a, b in itertools.pairwise(intervals)
    )


def since(history: list[list[Any]], started: float) -> list[list[Any]]:
    """A copy's state changes from the measured part on (the consumer's start): what went
    before is start-up (see ``startup_episodes``)."""
    return [[name, at] for name, at in history if float(at) >= started]


def startup_episodes(state: dict[str, Any], started: float) -> int:
    """How often a copy went tentative before the measured part (while it caught up): DPC on a
    machine too loaded for the budget, not the cut; reported, not checked."""
    return sum(
        1
        for name, at in state.get("history", [])
        if name == NodeState.UP_FAILURE.value and float(at) < started
    )


def tentative_for_the_cut(
    history: list[list[Any]], started: float, failure_at: float, heal_at: float
) -> bool:
    """The copy was tentative during the cut and never went so between the consumer's start and
    the cut: it went UP_FAILURE within [failure_at, heal_at), or it was still UP_FAILURE from its
    start-up when the cut came (one reconciliation after the heal corrects both; a bench run at
    100 ms buckets had a copy so, session 30)."""
    went = [float(at) for name, at in since(history, started) if name == NodeState.UP_FAILURE.value]
    if any(at < failure_at for at in went):
        return False
    in_cut = any(failure_at <= at < heal_at for at in went)
    return in_cut or _state_at(history, failure_at) == NodeState.UP_FAILURE.value


def held_permit_after_heal(intervals: list[dict[str, Any]], holder: str, heal_at: float) -> bool:
    """``holder`` held the reconciliation permit at some moment after the heal: granted after
    it, or granted before it (a start-up episode's redo that went on through the cut) and
    released after it."""
    return any(
        i["replica"] == holder and (i["released"] is None or i["released"] >= heal_at)
        for i in intervals
    )


def _state_at(history: list[list[Any]], at: float) -> str | None:
    state = None
    for name, since in history:
        if float(since) <= at:
            state = str(name)
    return state


def one_copy_serving(histories: list[list[list[Any]]], lo: float, hi: float) -> bool:
    """At every moment in [lo, hi] one copy is STABLE or UP_FAILURE (sending within X): checked
    at ``lo`` and at every change of state within it."""
    serving = {NodeState.STABLE.value, NodeState.UP_FAILURE.value}
    moments = [lo, *(float(at) for h in histories for _, at in h if lo <= float(at) <= hi)]
    return all(any(_state_at(h, at) in serving for h in histories) for at in moments)


def _reconciling(state: dict[str, Any]) -> list[dict[str, float | None]]:
    """Each reconciliation of a copy by its own record: began (the permit granted, the redo
    started), switched (the UNDO sent; None: the redo was dropped) and STABLE again after."""
    history = state.get("history", [])
    out: list[dict[str, float | None]] = []
    for record in state.get("reconciled", []):
        switched = record.get("switched")
        stable = None
        if switched is not None:
            # STABLE from the STABILIZATION this reconciliation entered, not from ``switched``:
            # the UNDO and REC_DONE go out inside the switch, so the copy is STABLE again before
            # the switch's own time is taken (after the redo query is adopted; seen in CI,
            # 2026-11-26: STABLE 62 ms before ``switched``, so the reconciliation read as never
            # done).
            entered = next(
                (
                    float(at)
                    for name, at in history
                    if name == NodeState.STABILIZATION.value and float(at) >= float(record["began"])
                ),
                float(switched),
            )
            stable = next(
                (
                    float(at)
                    for name, at in history
                    if name == NodeState.STABLE.value and float(at) >= entered
                ),
                None,
            )
        out.append(
            {
                "began": float(record["began"]),
                "switched": None if switched is None else float(switched),
                "stable": stable,
                # The state the redo restored (reconciliation time against state size).
                "checkpoint_bytes": record.get("checkpoint_bytes"),
                "state_rows": record.get("state_rows"),
            }
        )
    return out


_TIMES = ("began", "switched", "stable")


def _within_permits(
    periods: list[dict[str, float | None]], holder: str, intervals: list[dict[str, Any]]
) -> bool:
    """Every completed reconciliation of ``holder`` lies inside one of its permit intervals
    (the registry's clock and the agents' are this machine's)."""
    mine = [i for i in intervals if i["replica"] == holder]
    for period in periods:
        began, stable = period["began"], period["stable"]
        if began is None or stable is None:
            continue
        if not any(
            i["granted"] <= began and i["released"] is not None and stable <= i["released"]
            for i in mine
        ):
            return False
    return True


def _two_copies(
    report: dict[str, Any],
    states: dict[str, dict[str, Any]],
    logs: dict[str, CopyLogs],
    permit_records: list[dict[str, Any]] | str,
    *,
    started: float,
    failure_at: float,
    heal_at: float,
    finished_at: float,
) -> dict[str, CopyLatency]:
    """Per copy: its states, reconciliations, latency and corrected log; the permit's intervals
    from the registry's records; and the checks that the copies reconciled one at a time.
    Returns each copy's latencies (for the plot)."""

    def ms(at: float | None) -> int | None:
        return None if at is None else round((at - started) * 1000)

    copies: dict[str, dict[str, Any]] = {}
    corrected: dict[str, bool] = {}
    within_x: dict[str, bool] = {}
    periods = {
        holder: [p for p in _reconciling(state) if (p["began"] or 0) >= started]
        for holder, state in states.items()
    }
    latencies: dict[str, CopyLatency] = {}
    for holder, state in states.items():
        latency = CopyLatency.of(state, started, failure_at)
        latencies[holder] = latency
        tentative = latency.tentative_buckets
        history = since(state.get("history", []), started)
        through_cut = tentative_for_the_cut(state.get("history", []), started, failure_at, heal_at)
        boundary = logs[holder].boundary
        corrected[holder] = (
            state.get("state") == NodeState.STABLE.value
            and int(state.get("undos", 0)) >= 1
            and int(state.get("corrections", 0)) > 0
            and int(state.get("rec_dones", 0)) >= 1
            and through_cut
            and logs[holder].agree
            and bool(tentative)
            and int(boundary or 0) > tentative[-1]
        )
        added = latency.added
        within_x[holder] = added is not None and added <= latency_limit_s(
            float(state["max_delay_seconds"]), latency.bucket_s
        )
        copies[holder] = {
            "reconcile": report["reconcile_by_copy"][holder],
            "stood_down": stood_down_for_a_redo(state),
            "final_state": state.get("state"),
            "history": [[name, ms(float(at))] for name, at in history],
            "startup_episodes": startup_episodes(state, started),
            # Still UP_FAILURE from its start-up when the cut came (see tentative_for_the_cut).
            "up_failure_from_startup": through_cut
            and all(
                _state_at(state.get("history", []), at) == NodeState.UP_FAILURE.value
                for at in (started, failure_at)
            ),
            "reconciliations": [
                {k: ms(v) if k in _TIMES else v for k, v in p.items()} for p in periods[holder]
            ],
            "redo_failures": state.get("redo_failures"),
            "redo_recuts": state.get("redo_recuts"),
            "permits_lost": state.get("permits_lost"),
            # Where a reconciliation's time goes: the redo waiting for the serving query
            # (``DPCFragment.yield_redo``), and the delay budget the copy ran with.
            "redo_paused_s": state.get("redo_paused_s"),
            "budget_ms": state.get("budget_ms"),
            "min_budget_ms": state.get("min_budget_ms"),
            "tentative_rows": int(state.get("tentative_rows", 0)),
            "tentative_buckets": len(tentative),
            "undos": int(state.get("undos", 0)),
            "corrections": int(state.get("corrections", 0)),
            "rec_dones": int(state.get("rec_dones", 0)),
            "baseline_latency_ms": None
            if latency.baseline is None
            else round(latency.baseline * 1000, 1),
            "max_added_latency_ms": None if added is None else round(added * 1000, 1),
            "log_boundary": boundary,
            "log_rows_compared": len(logs[holder].replica_rows),
            "log_equals_owners": logs[holder].agree,
            "notes": state.get("notes"),
        }
    report["copies"] = copies
    report["first_version"] = first_version_latency(list(latencies.values()), started, failure_at)
    if isinstance(permit_records, str):
        report["permit_intervals"] = permit_records
        intervals: list[dict[str, Any]] = []
        overlap = True
    else:
        intervals = permit_intervals(permit_records)
        overlap = intervals_overlap(intervals)
        report["permit_intervals"] = [
            {
                "replica": i["replica"],
                "fence": i["fence"],
                "granted_ms": ms(i["granted"]),
                "released_ms": ms(i["released"]),
            }
            for i in intervals
        ]
    report["reconciliations_overlap"] = overlap
    histories = [state.get("history", []) for state in states.values()]
    report["checks"].update(
        {
            # The registry granted the permit to one copy at a time, each released it before
            # the next grant, both copies held it after the heal, and each copy's reconciliation
            # (redo to STABLE) lies inside its own permit.
            "reconciliations_one_at_a_time": not overlap
            and all(held_permit_after_heal(intervals, h, heal_at) for h in states)
            and all(_within_permits(periods[h], h, intervals) for h in states),
            "one_copy_serving_throughout": one_copy_serving(histories, failure_at, finished_at),
            "every_copy_corrected": all(corrected.values()),
            "every_copy_within_max_delay": all(within_x.values()),
        }
    )
    report["ok"] = all(report["checks"].values())
    return latencies
