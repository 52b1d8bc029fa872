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
them; every tentative row the consumer held was resolved.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from app.availability.consumer import Row
from app.availability.detector import PeerStatus
from app.availability.states import NodeState
from app.dataplane.streams import output_stream
from app.federation.document import load_federation
from app.participant.client import FedloadClient
from spark_jobs.ha.faultproxy import CutMode, FaultProxy
from spark_jobs.runtime.dataplane import TokenSource, registry_tokens
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.scenarios.harness import running, wait_until
from spark_jobs.scenarios.processes import (
    LOOPBACK,
    AgentSettings,
    Placement,
    ProcessFederation,
    free_port,
)
from spark_jobs.scenarios.replicas import (
    Consumer,
    FlightCompanion,
    FlightLink,
    ReplicaPair,
    dpc_state,
    location,
    rows,
    start_active_replica,
)

FEDERATION = Path(__file__).with_name("tentative-federation.yaml")
OWNER, HOLDER, TASK = "O", "T", "O.x"
# Each source and the participant whose endpoint serves it (where it runs).
SOURCES = {"O.conns": OWNER, "O.far": HOLDER}
WINDOW_S = 2  # O.x's window in tentative-federation.yaml
PAIR = ReplicaPair(TASK, OWNER, HOLDER, WINDOW_S)
# The added-latency check's slack over X: the copy maps stime onto the wall clock from one
# boundary its slowest source reported at start, and a source closes a bucket once a second, so
# that mapping is late by up to one bucket; the baseline (a median) does not take it out.
LATENCY_SLACK_S = 1.0


@dataclass(frozen=True)
class TentativeOptions:
    report_dir: Path = Path("var/reports/demo/tentative")
    work: Path | None = None
    database_url: str | None = None
    # The consumer's failure detector (as in the partition scenario: wider than Borealis's
    # 100 ms x 3, the pings are answered by an agent that also drives Spark).
    heartbeat_s: float = 0.5
    misses: int = 4
    # Long beside X: the copy goes tentative only once its budget has passed (and once the
    # slower source reaches where the cut stopped O.conns), and windows are 2 s.
    fail_for_s: float = 12.0
    cut_mode: CutMode = "drop"
    before_cut_s: float = 4.0
    # Output the consumer reads once the copy is STABLE again.
    after_heal_s: float = 4.0
    # The agents' heartbeats to the service (failed after 3 missed).
    heartbeat_interval: float = 5.0
    startup_timeout_s: float = 600.0
    reconcile_timeout_s: float = 120.0
    reference_timeout_s: float = 120.0


def run_tentative(options: TentativeOptions, console: Console | None = None) -> dict[str, Any]:
    console = console or Console()
    doc = load_federation(FEDERATION)
    work = options.work or Path(tempfile.mkdtemp(prefix="fedload-tentative-"))
    # O listens on a port of its own and advertises the proxy's: every link into O crosses it.
    o_port = free_port()
    proxy = FaultProxy(o_port)
    fed = ProcessFederation(
        doc,
        work,
        database_url=options.database_url,
        admin_key=secrets.token_urlsafe(16),
        heartbeat_interval=options.heartbeat_interval,
        agent_settings=AgentSettings(offer_interval=3600.0),
        placements={
            OWNER: Placement(
                port=o_port, args=("--spark-eager", "--advertise", f"{LOOPBACK}:{proxy.port}")
            ),
            HOLDER: Placement(args=("--spark-eager",)),
        },
    )
    try:
        with running(fed, console) as admin:
            return _run(options, console, fed, admin, proxy)
    finally:
        # Only now: O's own calls to its endpoint cross the proxy until its agent has stopped.
        proxy.close()


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
    streams = PAIR.streams

    def sources() -> int:
        # The newest bucket every source has closed (the slowest source's boundary).
        found = [
            _boundary(location(admin, at), output_stream(source), tokens)
            for source, at in SOURCES.items()
        ]
        return min(b or 0 for b in found)

    with console.status("O runs O.x; T starts its active replica and catches up ..."):
        start_active_replica(
            PAIR,
            fed.client(OWNER),
            lambda name: location(admin, name),
            tokens,
            sources,
            options.startup_timeout_s,
        )
    processes = fed.processes()
    locations = {name: location(admin, name) for name in PAIR.names}
    if locations[OWNER] != proxy.location:
        raise RuntimeError(f"O advertises {locations[OWNER]}, not its proxy {proxy.location}")

    def holder_state() -> dict[str, Any]:
        with StreamClient(locations[HOLDER], timeout=5.0, tokens=tokens) as client:
            return dpc_state(client, streams[HOLDER])

    def links(timeout: float) -> dict[str, FlightLink]:
        return {
            name: FlightLink(locations[name], streams[name], tokens, timeout) for name in PAIR.names
        }

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
    )
    # Where stime stands on the wall clock: a source closes a bucket as its second ends, and the
    # slowest one decides when a bucket is complete (for the consumer's latencies only).
    stime_to_wall = time.time() - float(sources())
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
        console.print(f"healed; {HOLDER}'s copy should reconcile under the permit")

        def reconciled() -> bool:
            state = holder_state()
            return state["state"] == NodeState.STABLE.value and int(state["reconciliations"]) > 0

        with contextlib.suppress(TimeoutError):
            wait_until(
                f"{HOLDER}'s copy to reconcile", reconciled, options.reconcile_timeout_s, every=0.5
            )

        def resolved() -> bool:
            # The consumer's stable output has passed every tentative row it was shown.
            newest = max(consumer.tentative_seen, default=-1) // 1000
            return consumer.rule.next_bucket > newest

        def log_corrected() -> bool:
            # T's stable log resumes its boundary once STABLE: wait until it passes every
            # bucket the copy processed (tentatively included) before comparing it.
            processed = max((int(b[0]) for b in holder_state()["batches"]), default=0)
            return (_boundary(locations[HOLDER], streams[HOLDER], tokens) or 0) >= processed

        with contextlib.suppress(TimeoutError):
            wait_until(f"{HOLDER}'s log to pass what it processed", log_corrected, 60, every=1.0)
        with contextlib.suppress(TimeoutError):
            wait_until("the consumer's stable output to pass the failure", resolved, 60)
        time.sleep(options.after_heal_s)
    finally:
        consumer.stop()
    final_state = holder_state()
    registry_replicas = [
        {k: r.get(k) for k in ("task", "host", "technique", "state")} for r in admin.replicas()
    ]
    try:
        permits: list[dict[str, Any]] | str = admin.permits()
    except Exception as error:  # the report says why, the checks do not depend on it
        permits = f"{type(error).__name__}: {error}"
    read_upto = consumer.rule.next_bucket
    with contextlib.suppress(TimeoutError):
        wait_until(
            "O's log to reach what the consumer read",
            lambda: (_boundary(locations[OWNER], streams[OWNER], tokens) or 0) >= read_upto,
            options.reference_timeout_s,
            every=1.0,
        )
    with StreamClient(locations[OWNER], tokens=tokens) as client:
        o_boundary = client.info(streams[OWNER])["boundary"]
        upto = min(read_upto, int(o_boundary or 0))
        reference = sorted(rows(client.read(streams[OWNER], -(2**62), upto)))
    replay_from = int(final_state["replay_from"])
    with StreamClient(locations[HOLDER], tokens=tokens) as client:
        t_boundary = client.info(streams[HOLDER])["boundary"]
    both = min(int(b) for b in (o_boundary, t_boundary) if b is not None)
    with StreamClient(locations[HOLDER], tokens=tokens) as client:
        t_rows = sorted(rows(client.read(streams[HOLDER], replay_from + 1, both)))
    with StreamClient(locations[OWNER], tokens=tokens) as client:
        o_rows = sorted(rows(client.read(streams[OWNER], replay_from + 1, both)))
    report = _report(
        options,
        consumer,
        processes,
        reference,
        final_state,
        failure_at=failure_at,
        heal_at=heal_at,
        started=started,
        compared_below=upto,
        stime_to_wall=stime_to_wall,
        replica_rows=len(t_rows),
        replicas_agree=bool(t_rows) and t_rows == o_rows,
        boundaries={OWNER: o_boundary, HOLDER: t_boundary},
    )
    report["proxy_stats"] = asdict(proxy.stats)
    report["registry_replicas"] = registry_replicas
    report["permits"] = permits
    options.report_dir.mkdir(parents=True, exist_ok=True)
    (options.report_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    for check, passed in report["checks"].items():
        console.print(f"{'[green]pass[/]' if passed else '[red]FAIL[/]'} {check}")
    console.print(f"report: {options.report_dir / 'report.json'}")
    return report


def node_latencies(holder: dict[str, Any]) -> dict[int, tuple[float, bool]]:
    """The paper's latency at the copy, per input bucket: the first batch that processed it
    (tentatively or stably) sent its output this many seconds after the bucket's end on the
    copy's clock; and whether that batch was tentative."""
    offset_s = float(holder["clock_offset_ms"]) / 1000
    first: dict[int, tuple[float, bool]] = {}
    previous_end: int | None = None
    for end, tentative, sent_at in sorted(holder["batches"], key=lambda b: float(b[2])):
        end = int(end)
        lo = end - 1 if previous_end is None else previous_end
        for bucket in range(lo, end):
            if bucket not in first:
                first[bucket] = (float(sent_at) - (bucket + 1 + offset_s), bool(tentative))
        previous_end = end if previous_end is None else max(previous_end, end)
    return first


def _stabilizations(history: list[list[Any]], started: float) -> list[list[int | None]]:
    """[began, ended] of each STABILIZATION, in ms since the consumer started."""
    periods: list[list[int | None]] = []
    began: float | None = None
    for state, at in history:
        if state == NodeState.STABILIZATION.value:
            began = float(at)
        elif began is not None:
            periods.append([round((began - started) * 1000), round((float(at) - started) * 1000)])
            began = None
    if began is not None:
        periods.append([round((began - started) * 1000), None])
    return periods


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

    # At the node: per input bucket, first processed minus its end, above the median before
    # the cut (buckets the copy processed before the consumer started are its start-up).
    per_bucket = node_latencies(holder)
    offset_s = float(holder["clock_offset_ms"]) / 1000
    before = [
        lat
        for bucket, (lat, _) in per_bucket.items()
        if started <= bucket + 1 + offset_s < failure_at
    ]
    live = {b: v for b, v in per_bucket.items() if bucket_after(b, offset_s, started)}
    baseline = statistics.median(before) if before else None
    worst = max((lat for lat, _ in live.values()), default=None)
    added = None if baseline is None or worst is None else worst - baseline
    tentative_buckets = sorted(b for b, (_, tentative) in live.items() if tentative)
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

    history = holder.get("history", [])
    tentative_at = [float(at) for state, at in history if state == NodeState.UP_FAILURE.value]
    output = rule.output()
    compared = [r for r in output if int(r[0].timestamp()) < compared_below]
    missing = set(reference) - set(compared)
    via_replica = sum(
        1
        for d in rule.delivered.values()
        if d.replica == HOLDER and int(d.row[0].timestamp()) < compared_below
    )
    held_at_end = sum(len(rows) for rows in rule.held.values())
    reconciled = holder.get("reconciled", [])
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
            1 for b in tentative_buckets if b + 1 + offset_s < heal_at
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
            "end_ms": ms((w := max(live, key=lambda b: live[b][0])) + 1 + offset_s),
            "tentative": live[w][1],
        },
        "latency_slack_ms": round(LATENCY_SLACK_S * 1000),
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
    limit_s = max_delay_s + LATENCY_SLACK_S
    report["checks"] = {
        "output_matches_reference": bool(reference) and compared == reference and via_replica > 0,
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


def bucket_after(bucket: int, offset_s: float, started: float) -> bool:
    """Whether the bucket ended (on the copy's clock) after the consumer started."""
    return bucket + 1 + offset_s >= started
