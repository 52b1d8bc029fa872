"""A Spark fragment downstream of a replicated one keeps producing while the primary of its input
is cut off, by reading the input's active copy (issue 13, item 4: consumers that are SUnion
inputs of Spark fragments choose a STABLE upstream replica first).

``fedload serve`` and one ``fedload agent`` per participant of ``downstream-federation.yaml``:
O owns the source O.conns (served at O) and a chain of two fragments, O.p (port scanners) hosted
on S and O.s (scanners per /24 prefix, reading O.p) hosted on P; T holds O.p's active replica,
a DPC copy in T's agent writing its own log ``O.p.out@T``. A fragment's output log is its
owner's, so O keeps ``O.p.out`` and ``O.s.out``. The driver does what an owner would: O places
the replica (``POST /v1/tasks/O.p/replicas``); only then does P's agent start, so that O.s's
first spec already names T's copy among its input's sources (``TaskInputRead.active_copies``,
``StreamRef.alternates``): the run measures reading from a copy, not how soon a copy placed
later reaches a running fragment (``FragmentRuntime.update_alternates``, tested on its own).

The cut: S reaches O through a fault proxy of its own (``FEDLOAD_FAULT_ROUTES``), and the
scenario drops that link. O.p's primary on S can neither read O.conns nor write its output, so
O's log of O.p stands still, while T's copy (its input read from O directly) goes on. O.s's
SUnion reads each bucket from the first of O.p's logs that holds it complete: from T's once
O's lags (``spark_jobs.runtime.sunion``, "Replicated inputs").

Evidence that O.s read T's copy, from what the logs already say: a fragment acknowledges, at
every source of an input, the buckets it has durably processed, so O.s's acknowledgement past
the newest bucket O's log of O.p had closed means those buckets came from T's log. Checks: O.s
went on during the cut (its output boundary advanced, its acknowledged input passed O's
standing boundary), O's log of O.p really stood still, O.s's output equals a failure-free run
of the same chain over the same seeded input (nothing lost, nothing twice), T's copy stayed
STABLE, and O's log caught up after the heal.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from rich.console import Console

from app.dataplane.streams import output_stream
from app.federation.document import load_federation
from app.participant.client import FedloadClient
from spark_jobs.ha.faultproxy import CutMode, FaultProxy
from spark_jobs.runtime.dataplane import TokenSource, registry_tokens
from spark_jobs.runtime.participant_host import FAULT_ROUTES_ENV
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.scenarios.harness import running, wait_until
from spark_jobs.scenarios.processes import Placement, ProcessFederation, free_port
from spark_jobs.scenarios.reference import check_rows, live_rows
from spark_jobs.scenarios.replicas import (
    ReplicaSet,
    RunOptions,
    dpc_state,
    location,
    scenario_federation,
    start_active_replica,
    write_report,
)
from spark_jobs.session import build_session

FEDERATION = Path(__file__).with_name("downstream-federation.yaml")
OWNER, PRIMARY, HOLDER, CONSUMER = "O", "S", "T", "P"
SOURCE, UPSTREAM, DOWNSTREAM = "O.conns", "O.p", "O.s"
UPSTREAM_WINDOW_S, DOWNSTREAM_WINDOW_S = 2, 4  # as in downstream-federation.yaml
PAIR = ReplicaSet(UPSTREAM, OWNER, (HOLDER,), UPSTREAM_WINDOW_S)


@dataclass(frozen=True)
class DownstreamOptions(RunOptions):
    report_dir: Path = Path("var/reports/demo/downstream")
    # Shorter than the service's failure window (3 heartbeats of 5 s): S is cut from O, not
    # from the registry, and must not be failed over meanwhile.
    fail_for_s: float = 10.0
    cut_mode: CutMode = "drop"
    before_cut_s: float = 3.0
    after_heal_s: float = 4.0
    sample_every_s: float = 0.5
    catch_up_timeout_s: float = 120.0


@dataclass(frozen=True)
class Sample:
    """One look at the logs during the cut, in buckets (seconds of stime)."""

    at: float
    primary_log: int | None  # O's log of O.p: its boundary
    copy_log: int | None  # T's log of O.p
    downstream: int | None  # O's log of O.s
    # What O.s has acknowledged as processed of its input, at O's log and at T's.
    acked_at_primary: int | None
    acked_at_copy: int | None


def downstream_evidence(samples: list[Sample], at_cut: Sample) -> dict[str, Any]:
    """What the samples taken during the cut say. O.s acknowledges at every source only input
    buckets it has durably processed, and reads a bucket only from a log that holds it
    complete; so an acknowledgement past the furthest boundary O's log of O.p reached during
    the cut counts buckets O.s read from T's copy."""
    primary = max((s.primary_log for s in samples if s.primary_log is not None), default=None)
    acked = [a for s in samples for a in (s.acked_at_primary, s.acked_at_copy) if a is not None]
    downstream = max((s.downstream for s in samples if s.downstream is not None), default=None)
    copy = max((s.copy_log for s in samples if s.copy_log is not None), default=None)

    def gain(now: int | None, then: int | None) -> int | None:
        return None if now is None or then is None else now - then

    read_from_copy = None if primary is None or not acked else max(acked) - primary
    return {
        # O.s's output boundary is where its watermark stands, the newest O.p window end it
        # has read: past O's standing log, that window came from T's.
        "downstream_past_primary_log": gain(downstream, primary),
        "primary_log_advanced": gain(primary, at_cut.primary_log),
        "copy_log_advanced": gain(copy, at_cut.copy_log),
        "downstream_advanced": gain(downstream, at_cut.downstream),
        "primary_log_max": primary,
        "acked_max": max(acked) if acked else None,
        "buckets_read_from_copy": read_from_copy,
    }


def run_downstream(
    options: DownstreamOptions, console: Console | None = None, spark: SparkSession | None = None
) -> dict[str, Any]:
    """``spark``: the session for the reference run (a test's shared one, which this leaves
    running); None: one of its own, stopped at the end."""
    console = console or Console()
    # S's own route to O crosses this proxy; every other link into O stays direct.
    o_port = free_port()
    proxy = FaultProxy(o_port)
    eager = Placement(args=("--spark-eager",))
    placements = {
        OWNER: Placement(port=o_port),
        PRIMARY: Placement(
            args=("--spark-eager",), env=((FAULT_ROUTES_ENV, f"{OWNER}={proxy.location}"),)
        ),
        HOLDER: eager,
        CONSUMER: eager,
    }
    fed = scenario_federation(load_federation(FEDERATION), options, placements, "downstream")
    try:
        with running(fed, console, later=(CONSUMER,)) as admin:
            return _run(options, console, fed, admin, proxy, spark)
    finally:
        # Only now: S's calls to O cross the proxy until its agent has stopped.
        proxy.close()


def _info(where: str, stream: str, tokens: TokenSource) -> dict[str, Any]:
    with StreamClient(where, timeout=5.0, tokens=tokens) as client:
        return client.info(stream)


def _run(
    options: DownstreamOptions,
    console: Console,
    fed: ProcessFederation,
    admin: FedloadClient,
    proxy: FaultProxy,
    spark: SparkSession | None,
) -> dict[str, Any]:
    tokens = registry_tokens(admin)
    o_at: str = wait_until(
        "O's agent to report its endpoint",
        lambda: location(admin, OWNER),
        options.startup_timeout_s,
    )
    copy_stream = PAIR.streams[HOLDER]
    p_stream, s_stream = output_stream(UPSTREAM), output_stream(DOWNSTREAM)

    def source_end() -> int:
        return int(_info(o_at, output_stream(SOURCE), tokens)["boundary"] or 0)

    with console.status("S runs O.p; T starts its active replica and catches up ..."):
        # P's agent starts once the replica is placed (O.s's first spec names T's copy then)
        # and O's log of O.p holds rows, not once T's copy has caught up: P's Spark starts
        # while T's copy catches up, not after it. Not before O.p's first rows: O.s, started
        # over an empty log, would begin at bucket 0 and its reader would step through every
        # bucket number from there to now. Until T's copy has begun its log O.s reads O's
        # alone (an alternate without the stream is no source yet); the waits below see it
        # read T's copy.
        start_active_replica(
            PAIR,
            fed.client(OWNER),
            lambda name: location(admin, name),
            tokens,
            source_end,
            options.startup_timeout_s,
            once_writing=lambda: fed.start_agent(CONSUMER),
        )
    t_at = location(admin, HOLDER)

    def boundary(where: str, stream: str) -> int | None:
        found = _info(where, stream, tokens)["boundary"]
        return None if found is None else int(found)

    def acked(where: str, stream: str) -> int | None:
        found = _info(where, stream, tokens)["acks"].get(DOWNSTREAM)
        return None if found is None else int(found)

    with console.status("P's agent runs O.s over O.p's logs ..."):
        wait_until(
            "O.s to write output at O",
            lambda: _info(o_at, s_stream, tokens)["rows"] > 0,
            options.startup_timeout_s,
        )
        # O.s acknowledges at every source of its input it knows: at T's log only if its spec
        # named T's copy.
        wait_until(
            "O.s to acknowledge its input at T's copy",
            lambda: acked(t_at, copy_stream) is not None,
            60,
        )
        with contextlib.suppress(TimeoutError):
            wait_until(
                "O.s to work through O.p's backlog",
                lambda: (
                    (boundary(o_at, s_stream) or 0)
                    >= (boundary(o_at, p_stream) or 0) - 2 * DOWNSTREAM_WINDOW_S
                ),
                options.catch_up_timeout_s,
                every=1.0,
            )

    def sample() -> Sample:
        return Sample(
            time.time(),
            boundary(o_at, p_stream),
            boundary(t_at, copy_stream),
            boundary(o_at, s_stream),
            acked(o_at, p_stream),
            acked(t_at, copy_stream),
        )

    processes = fed.processes()
    time.sleep(options.before_cut_s)
    started = time.time()
    at_cut = sample()
    console.print(f"cutting {PRIMARY}'s link to {OWNER} ({options.cut_mode})")
    proxy.cut(options.cut_mode)
    failure_at = time.time()
    samples: list[Sample] = []
    while time.time() < failure_at + options.fail_for_s:
        samples.append(sample())
        time.sleep(options.sample_every_s)
    samples.append(sample())
    heal_at = time.time()
    proxy.heal()
    console.print(f"healed; {PRIMARY} should bring O's log of O.p up to T's")
    time.sleep(options.after_heal_s)
    caught_up: float | None = None
    copy_at_heal = samples[-1].copy_log or 0
    with contextlib.suppress(TimeoutError):
        wait_until(
            "O's log of O.p to pass where T's stood at the heal",
            lambda: (boundary(o_at, p_stream) or 0) >= copy_at_heal,
            options.catch_up_timeout_s,
            every=0.5,
        )
        caught_up = time.time()
    holder = dpc_state_at(t_at, copy_stream, tokens)
    registry_replicas = [
        {k: r.get(k) for k in ("task", "host", "technique", "state")} for r in admin.replicas()
    ]
    tasks = {t["name"]: t for t in admin.tasks()}
    live = live_rows(o_at, s_stream, tokens)
    # No comparison of T's log with O's here (the partition scenario makes it): O.s
    # acknowledges at both, so both drop what it has read, and O's drops the buckets read from
    # T's as soon as S writes them. The output's comparison covers what O.s read from either.
    o_log, t_log = _info(o_at, p_stream, tokens), _info(t_at, copy_stream, tokens)
    # The output is read: the agents stop, so that the reference run has the machine.
    fed.close(list(fed.agents))
    console.print("comparing O.s's output with a run of the chain without failures ...")
    # Stopping a session this process shares (getOrCreate hands back a test run's) would stop
    # it for everything after: seen in CI, every later test on the shared session failed.
    session = spark or build_session(app_name="fedload-downstream-reference", master="local[1]")
    try:
        upstream = tasks[UPSTREAM]
        comparison = check_rows(
            session,
            live,
            tasks[DOWNSTREAM],
            tasks[SOURCE]["params"],
            upstream=(str(upstream["fragment"]), upstream["params"]),
        )
    finally:
        if spark is None:
            session.stop()
    evidence = downstream_evidence(samples, at_cut)

    def ms(at: float | None) -> int | None:
        return None if at is None else round((at - started) * 1000)

    report: dict[str, Any] = {
        "scenario": "downstream",
        "engine": "spark",
        "through": "fedload serve + fedload agent processes",
        "processes": processes,
        "cut": f"{PRIMARY}'s link to {OWNER} (a fault proxy on {PRIMARY}'s route only)",
        "cut_mode": options.cut_mode,
        "failure_at_ms": ms(failure_at),
        "heal_at_ms": ms(heal_at),
        "primary_caught_up_at_ms": ms(caught_up),
        "at_cut": asdict(at_cut) | {"at": ms(at_cut.at)},
        "samples": [asdict(s) | {"at": ms(s.at)} for s in samples],
        "evidence": evidence,
        "replica_state": holder,
        "registry_replicas": registry_replicas,
        "output": comparison.as_dict(),
        "upstream_logs": {
            name: {k: info[k] for k in ("boundary", "first", "acks")}
            for name, info in ((OWNER, o_log), (HOLDER, t_log))
        },
        "proxy_stats": asdict(proxy.stats),
    }
    report["checks"] = {
        # A write in flight at the cut may still land.
        "primary_log_stood_still": (evidence["primary_log_advanced"] or 0) <= UPSTREAM_WINDOW_S,
        "copy_went_on": (evidence["copy_log_advanced"] or 0) >= options.fail_for_s / 2,
        # Past what O's standing log could feed it: without T's copy O.s only finishes the
        # windows it had read (a run with the alternates turned off: -2 buckets).
        "downstream_went_on": (evidence["downstream_past_primary_log"] or 0) > 0,
        "downstream_read_the_copy": (evidence["buckets_read_from_copy"] or 0) > 0,
        "output_matches_reference": comparison.matches,
        "copy_stayed_stable": holder.get("state") == "STABLE"
        and int(holder.get("tentative_rows", 0)) == 0,
        "primary_caught_up": caught_up is not None,
    }
    report["ok"] = all(report["checks"].values())
    write_report(report, options.report_dir, console)
    return report


def dpc_state_at(where: str, stream: str, tokens: TokenSource) -> dict[str, Any]:
    with StreamClient(where, timeout=5.0, tokens=tokens) as client:
        return dpc_state(client, stream)
