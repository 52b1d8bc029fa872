"""``fedload demo --scenario partition`` through the product: a consumer loses its link to the
primary and switches to the active replica another agent runs.

``fedload serve`` and one ``fedload agent`` per participant of ``partition-federation.yaml``: O
owns and hosts O.x (a stateful fragment over O's own source) and T, under a contract that asks
precise recovery with X = 3 s, holds O.x's active replica: T's agent runs the fragment too, as a
DPC node (``spark_jobs.runtime.active``), writing its own log ``O.x.out@T``. The driver does what
an owner and an operator would: O places the replica (``POST /v1/tasks/O.x/replicas``), then a
consumer reads O.x's output (``app.availability.consumer``, the one consumer rule) with the
operator's read tokens, reaching each copy's endpoint through its own fault proxy
(``spark_jobs.ha.faultproxy``), so the link to O is cut for real (TCP held: a partition) while O,
T and every other link keep running. Failure detection is the one detector rule
(``app.availability.detector``) on pings over the same links.

Checks (the old partition report's, plus ``processes``): one switch O -> T after the cut; the
consumer stays with T after the heal although O answers again; no tentative output (T's inputs
were never cut: it stayed STABLE); nothing lost or delivered twice; the consumer's output equals
the failure-free output (O's own log: O was never failed, only cut off from the consumer, and
its inputs stayed local); and T's log agrees with O's over every window T computed.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
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
from spark_jobs.ha.faultproxy import FaultProxy
from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.scenarios.harness import running, wait_until
from spark_jobs.scenarios.processes import Placement, ProcessFederation
from spark_jobs.scenarios.replicas import (
    Consumer,
    FlightLink,
    ReplicaSet,
    ScenarioOptions,
    compare_logs,
    dpc_state,
    location,
    port,
    rows,
    scenario_federation,
    start_active_replica,
    write_report,
)

FEDERATION = Path(__file__).with_name("partition-federation.yaml")
OWNER, HOLDER, TASK, SOURCE = "O", "T", "O.x", "O.conns"
WINDOW_S = 4  # O.x's window in partition-federation.yaml
PAIR = ReplicaSet(TASK, OWNER, (HOLDER,), WINDOW_S)
REPLICAS = PAIR.names


@dataclass(frozen=True)
class PartitionOptions(ScenarioOptions):
    report_dir: Path = Path("var/reports/demo/partition")


def run_partition(options: PartitionOptions, console: Console | None = None) -> dict[str, Any]:
    console = console or Console()
    eager = Placement(args=("--spark-eager",))
    placements = {OWNER: eager, HOLDER: eager}
    fed = scenario_federation(load_federation(FEDERATION), options, placements, "partition")
    with running(fed, console) as admin:
        return _run(options, console, fed, admin)


def _run(
    options: PartitionOptions, console: Console, fed: ProcessFederation, admin: FedloadClient
) -> dict[str, Any]:
    # The operator's read tokens (the agents' endpoints refuse calls without one).
    tokens = registry_tokens(admin)
    streams = PAIR.streams

    def source_end() -> int:
        with StreamClient(location(admin, OWNER), timeout=5.0, tokens=tokens) as client:
            return int(client.info(output_stream(SOURCE))["boundary"] or 0)

    with console.status("O runs O.x; T starts its active replica and catches up ..."):
        start_active_replica(
            PAIR,
            fed.client(OWNER),
            lambda name: location(admin, name),
            tokens,
            source_end,
            options.startup_timeout_s,
        )

    def holder_state() -> dict[str, Any]:
        with StreamClient(location(admin, HOLDER), timeout=5.0, tokens=tokens) as client:
            return dpc_state(client, streams[HOLDER])

    def info(name: str) -> dict[str, Any]:
        with StreamClient(location(admin, name), timeout=5.0, tokens=tokens) as client:
            return client.info(streams[name])

    processes = fed.processes()
    locations = {name: location(admin, name) for name in REPLICAS}
    proxies = {name: FaultProxy(port(locations[name])) for name in REPLICAS}
    window = options.heartbeat_s * options.misses

    def links(timeout: float) -> dict[str, FlightLink]:
        return {
            name: FlightLink(proxies[name].location, streams[name], tokens, timeout)
            for name in REPLICAS
        }

    # Data calls wait one heartbeat interval at most (a slow answer is a read error, retried;
    # only the detector's pings, which wait to the end of the window, decide a failure).
    consumer = Consumer(
        streams[OWNER],
        links(options.heartbeat_s),
        links(window),
        {HOLDER},
        options.heartbeat_s,
        options.misses,
    )
    # Where the sources' stime stands on the wall clock: O's source closes a bucket as its
    # second ends, so now - its boundary maps stime onto wall time (for latencies only).
    with StreamClient(locations[OWNER], timeout=5.0, tokens=tokens) as client:
        source_boundary = client.info(output_stream(SOURCE))["boundary"]
    stime_to_wall = time.time() - float(source_boundary or 0)
    try:
        started = time.time()
        consumer.start()
        wait_until("the consumer's first rows from O", lambda: consumer.rule.delivered, 120)
        time.sleep(options.before_cut_s)
        delivered_before_cut = len(consumer.rule.delivered)
        console.print(f"cutting the consumer's link to {OWNER} ({options.cut_mode})")
        proxies[OWNER].cut(options.cut_mode)
        failure_at = time.time()
        time.sleep(options.fail_for_s)
        # Taken before the heal: an answer through the first re-connected connection may come
        # back before heal() returns.
        heal_at = time.time()
        proxies[OWNER].heal()
        console.print("healed; the consumer should stay with T")
        time.sleep(options.after_heal_s)
        wait_until(
            "O to answer the consumer again",
            lambda: any(a > heal_at for a in consumer.back_at[OWNER]),
            30,
        )
    finally:
        consumer.stop()
        for proxy in proxies.values():
            proxy.close()
    final_state = holder_state()
    # The registry's view: the state T's agent reported for its replica (the admin page's).
    registry_replicas = [
        {k: r.get(k) for k in ("task", "host", "technique", "state")} for r in admin.replicas()
    ]
    # The reference is O's own log (never failed, its input local): on a loaded machine it may
    # lag the replica, which started at the source's newest bucket while O worked through its
    # backlog, so give it time to reach what the consumer read, then compare below both.
    read_upto = consumer.rule.next_bucket
    with contextlib.suppress(TimeoutError):
        wait_until(
            "O's log to reach what the consumer read",
            lambda: (info(OWNER)["boundary"] or 0) >= read_upto,
            options.reference_timeout_s,
            every=1.0,
        )
    with StreamClient(locations[OWNER], tokens=tokens) as client:
        o_boundary = client.info(streams[OWNER])["boundary"]
        upto = min(read_upto, int(o_boundary or 0))
        reference = sorted(rows(client.read(streams[OWNER], -(2**62), upto)))
    logs = compare_logs(
        (locations[OWNER], streams[OWNER]),
        (locations[HOLDER], streams[HOLDER]),
        o_boundary,
        int(final_state["replay_from"]),
        tokens,
    )
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
        delivered_before_cut=delivered_before_cut,
        replicas_agree=logs.agree,
        boundaries={OWNER: o_boundary, HOLDER: logs.boundary},
        proxies=proxies,
    )
    report["registry_replicas"] = registry_replicas
    write_report(report, options.report_dir, console)
    return report


def _report(
    options: PartitionOptions,
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
    delivered_before_cut: int,
    replicas_agree: bool,
    boundaries: dict[str, Any],
    proxies: dict[str, FaultProxy],
) -> dict[str, Any]:
    rule = consumer.rule

    def ms(at: float) -> int:
        return round((at - started) * 1000)

    switches = [
        {
            "consumer": "operator",
            "stream": rule.stream,
            "from": s.from_replica,
            "to": s.to_replica,
            "at_ms": ms(s.at),
            "version": s.version,
            "resume_bucket": resume,
        }
        for s, resume in rule.switches
    ]
    moved = [
        s
        for s, _ in rule.switches
        if (s.from_replica, s.to_replica) == (OWNER, HOLDER) and s.at >= failure_at
    ]
    output = rule.output()
    # Latency of a row: when the consumer first had it minus its window's end on the wall
    # clock; added: the worst minus the median before the cut. Rows of the first read (the
    # log's backlog) are left out.
    lat = [
        (seen - rule.delivered[key].row[0].timestamp() - stime_to_wall, seen < failure_at)
        for key, seen in consumer.first_seen.items()
        if key not in consumer.backlog
    ]
    before = [v for v, early in lat if early]
    baseline = statistics.median(before) if before else None
    added = None if baseline is None or not lat else max(v for v, _ in lat) - baseline
    false_suspicions = [
        e
        for e in consumer.status_log
        if e["status"] == PeerStatus.FAILED and (e["replica"] != OWNER or e["at"] < failure_at)
    ]

    def longest_silence_ms(name: str) -> int | None:
        gaps = [
            b - a
            for a, b in itertools.pairwise(consumer.heard_at[name])
            if name != OWNER or b < failure_at or a > heal_at
        ]
        return round(max(gaps) * 1000) if gaps else None

    # What the consumer delivered below where the reference reaches (each row sits in the
    # bucket of its window's end); the rest is reported, not compared.
    compared = [r for r in output if int(r[0].timestamp()) < compared_below]
    missing = set(reference) - set(compared)
    via_replica = sum(
        1
        for d in rule.delivered.values()
        if d.replica == HOLDER and int(d.row[0].timestamp()) < compared_below
    )
    report: dict[str, Any] = {
        "scenario": "partition",
        "engine": "spark",
        "through": "fedload serve + fedload agent processes",
        "processes": processes,
        "cut_mode": options.cut_mode,
        "failure_at_ms": ms(failure_at),
        "heal_at_ms": ms(heal_at),
        "switches": switches,
        "detected_after_ms": round((moved[0].at - failure_at) * 1000) if moved else None,
        # The consumer reads stable logs only; T's own tentative output (none while its inputs
        # are reachable) is what it would have had to deliver without a stable copy.
        "tentative_tuples": int(holder.get("tentative_rows", 0)),
        "tentative_batches": int(holder.get("tentative_batches", 0)),
        "corrections": int(holder.get("corrections", 0)),
        "replica_state": holder,
        "input_duplicates": len(rule.duplicates),
        "deferred_switches": rule.deferred,
        "delivered_before_cut": delivered_before_cut,
        "rows_out": len(output),
        "reference_rows": len(reference),
        "rows_by_version": rule.rows_by_version(),
        "false_suspicions": len(false_suspicions),
        "longest_silence_on_live_link_ms": {n: longest_silence_ms(n) for n in REPLICAS},
        "detector": {"interval_ms": round(options.heartbeat_s * 1000), "misses": options.misses},
        "compared_below_bucket": compared_below,
        "rows_compared": len(compared),
        "rows_compared_via_replica": via_replica,
        "difference": {"missing": len(missing), "extra": len(set(compared) - set(reference))},
        "replica_status_log": [
            {"replica": e["replica"], "status": e["status"], "at_ms": ms(e["at"])}
            for e in consumer.status_log
        ],
        "rows_after_heal": sum(1 for seen in consumer.first_seen.values() if seen > heal_at),
        "o_heard_again_after_heal_ms": next(
            (round((a - heal_at) * 1000) for a in consumer.back_at[OWNER] if a > heal_at), None
        ),
        "baseline_latency_ms": None if baseline is None else round(baseline * 1000, 1),
        "max_latency_ms": round(max(v for v, _ in lat) * 1000, 1) if lat else None,
        "max_added_latency_ms": None if added is None else round(added * 1000, 1),
        "max_delay_ms": round(float(holder.get("max_delay_seconds", 0)) * 1000),
        "read_errors": consumer.read_errors,
        "consumer_errors": consumer.errors[-20:],
        "log_boundaries": boundaries,
        "proxy_stats": {name: asdict(proxy.stats) for name, proxy in proxies.items()},
    }
    report["checks"] = {
        # Rows through the replica among those compared: else the check says nothing of it.
        "output_matches_reference": bool(reference) and compared == reference and via_replica > 0,
        "switched_to_replica": len(rule.switches) == 1 and len(moved) == 1,
        "stays_after_heal": rule.current == HOLDER
        and report["o_heard_again_after_heal_ms"] is not None
        and report["rows_after_heal"] > 0,
        "no_tentative_output": report["tentative_tuples"] == 0
        and holder.get("state") == NodeState.STABLE.value,
        "no_duplicates": not rule.duplicates and len(output) == len(set(output)),
        "no_losses": not missing,
        "consumer_loop_without_errors": not consumer.errors,
        "replicas_agree": replicas_agree,
    }
    report["ok"] = all(report["checks"].values())
    return report
