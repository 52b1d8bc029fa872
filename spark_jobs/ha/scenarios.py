"""A plain-Python model of the HA scenarios: DPC node processes (``spark_jobs.ha.node``) over
real sockets with real faults, no Spark and no registry agents; each ends with the check that
the final stable output equals the failure-free output, and writes ``report.json``.

A model, not the product: ``fedload demo --scenario partition|tentative|crash`` runs the
product's own processes (``spark_jobs/scenarios/``); this one runs with ``--engine python``, and
the tests that use it check the DPC rules on small, fast timings.

- ``partition`` (the Borealis partition demonstration): A feeds B and its replica R, C consumes
  B. The link B-C is cut (packets dropped); C's failure detector notices, C switches to R and
  resynchronises by key, with no duplicates and no losses; after the heal C stays with R.
- ``tentative``: two sources feed C and its replica C2; the link from source S2 to both is cut,
  so no stable replica of S2's stream is reachable. C keeps producing (tentative) results within
  the maximum delay X, and after the heal reconciles (checkpoint/redo) and corrects them:
  UNDO, corrections, REC_DONE. C and C2 ask each other before reconciling, never together.
- ``crash``: A feeds a stateful fragment B (windowed counts) whose host is SIGKILLed, once per
  failover technique: upstream backup (a spare rebuilds the state from A's output log, from the
  point B acknowledged), passive standby (B shipped its checkpoint to the backup every N ms; the
  backup restores the last one and replays from its offsets), active standby (a replica runs all
  along; C switches to it). The registry (``MovementCoordinator``) records the failover as a
  movement, and the new epoch fences the dead host out of C's input.

The reference is computed here from the same deterministic source rows with the same pure
operators, bucket by bucket, without any failure.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from app.availability import (
    FailureDetector,
    Message,
    Operator,
    Row,
    StreamView,
    WindowCount,
)
from app.availability.heartbeats import wait_until_failed
from app.availability.operators import Passthrough
from app.availability.simulation import source_rows
from spark_jobs.ha.cluster import Cluster
from spark_jobs.runtime.coordinator import InMemoryCoordinator, MovementCoordinator

SCENARIOS = ("partition", "tentative", "crash")
TECHNIQUES = ("upstream_backup", "passive_standby", "active_standby")


@dataclass(frozen=True)
class Timings:
    """Every duration of a scenario run (ms). Defaults: X = 3 s as in the Borealis paper."""

    bucket_ms: int = 200
    window_ms: int = 1000
    max_delay_ms: int = 3000
    rate: int = 40
    keys: int = 5
    duration_ms: int = 12_000
    fail_at_ms: int = 3000
    fail_for_ms: int = 5000
    heartbeat_ms: int = 100
    misses: int = 3
    checkpoint_every_ms: int = 500
    strategy: str = "delay_each"
    cut_mode: str = "drop"
    # Buckets a reconciling node redoes per loop (None: all at once); spreading the redo over
    # loops makes reconciliation take time, as it does with real state.
    replay_per_tick: int | None = 2
    startup_s: float = 2.5

    @classmethod
    def quick(cls) -> Timings:
        """Short runs for the integration tests (X = 2 s, 3.5 s failure, 8 s of input).

        X leaves 10% of itself (200 ms) for normal processing on top of the delay budget; on a
        busy 2-core machine a process can be descheduled for 100 ms, so X is not smaller."""
        return cls(max_delay_ms=2000, duration_ms=8000, fail_at_ms=3000, fail_for_ms=3500)

    @property
    def cutoff_ms(self) -> int:
        # Compare whole windows: every window that any input row falls in, all closed.
        windows = -(-self.duration_ms // self.window_ms)
        return (windows + 1) * self.window_ms


def reference(
    sources: Sequence[list[Row]], operators: Sequence[Operator], bucket_ms: int, cutoff_ms: int
) -> list[Row]:
    """The failure-free output: every bucket in order through the operators in sequence."""
    by_bucket: dict[int, list[Row]] = {}
    for rows in sources:
        for row in rows:
            by_bucket.setdefault(row.stime // bucket_ms, []).append(row)
    out: list[Row] = []
    for bucket in range(cutoff_ms // bucket_ms):
        rows = sorted(by_bucket.get(bucket, []))
        for operator in operators:
            rows = operator.process(bucket, rows)
        out.extend(rows)
    return [row for row in out if row.stime < cutoff_ms]


def _source(prefix: str, t: Timings, consumers: list[str]) -> dict[str, Any]:
    return {
        "role": "source",
        "source": {
            "prefix": prefix,
            "rate": t.rate,
            "duration_ms": t.duration_ms,
            "keys": t.keys,
        },
        "consumers": consumers,
    }


def _fragment(
    t: Timings, operator: dict[str, Any], inputs: dict[str, dict[str, str]], **more: Any
) -> dict[str, Any]:
    return {
        "role": "fragment",
        "bucket_ms": t.bucket_ms,
        "max_delay_ms": t.max_delay_ms,
        "strategy": t.strategy,
        "heartbeat_ms": t.heartbeat_ms,
        "misses": t.misses,
        "operator": operator,
        "replay_per_tick": t.replay_per_tick,
        "inputs": {stream: {"replicas": replicas} for stream, replicas in inputs.items()},
        **more,
    }


def _rows(t: Timings, prefix: str) -> list[Row]:
    return source_rows(prefix, rate_per_second=t.rate, duration_ms=t.duration_ms, keys=t.keys)


def _wait(cluster: Cluster, done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if done():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


def _wait_until_settled(
    cluster: Cluster, names: Sequence[str], t: Timings, *, slack_s: float = 20
) -> None:
    """Wait until every named node is STABLE and past the end of the input."""

    def settled() -> bool:
        for name in names:
            status = cluster.status(name)
            if status["state"] != "STABLE" or (status["boundary"] or 0) < t.cutoff_ms:
                return False
        return True

    what = " and ".join(names) + " to be STABLE past the end of input"
    _wait(cluster, settled, t.duration_ms / 1000 + slack_s, what)


def _difference(expected: list[Row], got: list[Row]) -> dict[str, Any]:
    """What differs between the reference and the output (empty when they are equal)."""
    if expected == got:
        return {}
    want, have = set(expected), set(got)
    missing, extra = sorted(want - have), sorted(have - want)
    return {
        "missing": len(missing),
        "extra": len(extra),
        "out_of_order_or_duplicated": not missing and not extra,
        "first_missing": missing[0].to_json() if missing else None,
        "first_extra": extra[0].to_json() if extra else None,
    }


def _view(messages: list[Message]) -> StreamView:
    view = StreamView()
    for message in messages:
        view.apply(message)
    return view


def _latencies(
    status: dict[str, Any], t: Timings, before_ms: int | None
) -> dict[str, float | None]:
    """Latency of each output row's first appearance (stable or tentative) after its bucket
    closed; the baseline is the median before the failure, "added" is the max above it."""
    values = []
    for stime, _tid, emitted in status["first_emit"]:
        if stime >= t.cutoff_ms:
            continue
        due = (stime // t.bucket_ms + 1) * t.bucket_ms
        values.append((stime, emitted - due))
    if not values:
        return {"max_latency_ms": None, "baseline_latency_ms": None, "max_added_latency_ms": None}
    # Rows due well before the failure: a window closing just at the failure is already late.
    before = [
        lat for stime, lat in values if before_ms is None or stime < before_ms - 2 * t.bucket_ms
    ]
    baseline = statistics.median(before) if before else 0.0
    worst = max(lat for _, lat in values)
    return {
        "max_latency_ms": float(worst),
        "baseline_latency_ms": float(baseline),
        "max_added_latency_ms": float(worst - baseline),
    }


def _switches(consumer: str, status: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"consumer": consumer, "stream": stream, "from": s["from"], "to": s["to"], "at_ms": s["at"]}
        for stream, info in status["inputs"].items()
        for s in info["switches"]
    ]


def _stabilizations(history: list[list[Any]]) -> list[tuple[int, int | None]]:
    periods: list[tuple[int, int | None]] = []
    start: int | None = None
    for state, at in history:
        if state == "STABILIZATION":
            start = at
        elif start is not None:
            periods.append((start, at))
            start = None
    if start is not None:
        periods.append((start, None))
    return periods


def _overlap(a: list[tuple[int, int | None]], b: list[tuple[int, int | None]]) -> bool:
    big = 1 << 62
    return any(s1 < (e2 or big) and s2 < (e1 or big) for s1, e1 in a for s2, e2 in b)


# -- partition ------------------------------------------------------------------------------
def run_partition(t: Timings, workdir: Path) -> dict[str, Any]:
    with Cluster(workdir, startup_seconds=t.startup_s) as cluster:
        bc = cluster.proxy("B-C", "B")
        rc = cluster.proxy("R-C", "R")
        passthrough = {"type": "passthrough", "drop_multiple": 3}
        a = {"a": {"A": cluster.location("A")}}
        cluster.start(
            {
                "A": _source("a", t, ["B", "R"]),
                "B": _fragment(t, passthrough, a, fragment="B", peers={"R": cluster.location("R")}),
                "R": _fragment(t, passthrough, a, fragment="B", peers={"B": cluster.location("B")}),
                "C": _fragment(
                    t,
                    {"type": "window_count", "window_ms": t.window_ms},
                    {"b": {"B": bc.location, "R": rc.location}},
                ),
            }
        )
        cluster.sleep_until(t.fail_at_ms)
        bc.cut(t.cut_mode)  # type: ignore[arg-type]
        failure_at = cluster.now_ms()
        cluster.sleep_until(t.fail_at_ms + t.fail_for_ms)
        # Before the heal: traffic may flow from the moment heal() begins (a heal is not atomic).
        heal_at = cluster.now_ms()
        bc.heal()
        _wait_until_settled(cluster, ["C"], t)
        status = cluster.status("C", full=True)
        messages = cluster.output("C")
    rows = _rows(t, "a")
    b_out = reference([rows], [Passthrough(3)], t.bucket_ms, t.cutoff_ms)
    expected = reference(
        [rows], [Passthrough(3), WindowCount(t.window_ms, t.bucket_ms)], t.bucket_ms, t.cutoff_ms
    )
    view = _view(messages)
    got = [r for r in view.stable if r.stime < t.cutoff_ms]
    switches = _switches("C", status)
    moved = [s for s in switches if s["from"] == "B" and s["to"] == "R"]
    input_keys = [tuple(k) for k in status["input_keys"]["b"] if k[0] < t.cutoff_ms]
    link = status["inputs"]["b"]
    report: dict[str, Any] = {
        "scenario": "partition",
        "failure_at_ms": failure_at,
        "heal_at_ms": heal_at,
        "switches": switches,
        "detected_after_ms": moved[0]["at_ms"] - failure_at if moved else None,
        "tentative_tuples": view.tentative_total,
        "corrections": view.corrections,
        "input_duplicates": link["duplicates"],
        **_latencies(status, t, failure_at),
        "consumer_loop_errors": status["errors"],
        "difference": _difference(expected, got),
        "checks": {
            "output_matches_reference": bool(expected) and got == expected,
            "consumer_loop_without_errors": status["errors"] == 0,
            "switched_to_replica": len(moved) == 1,
            "stayed_with_replica_after_heal": link["current"] == "R",
            "no_duplicates": link["duplicates"] == 0 and view.duplicates == 0,
            "no_losses": input_keys == [r.key for r in b_out],
            "no_tentative_output": view.tentative_total == 0,
        },
    }
    return report


# -- tentative ------------------------------------------------------------------------------
def run_tentative(
    t: Timings,
    workdir: Path,
    *,
    registry: dict[str, dict[str, Any]] | None = None,
    during_failure: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """``registry``: per node, where and as whom it reports to the registry (see
    ``spark_jobs.ha.registry``); ``during_failure`` is called once the replicas went
    tentative, and what it returns is in the report."""
    window = {"type": "window_count", "window_ms": t.window_ms}
    registry = registry or {}
    with Cluster(workdir, startup_seconds=t.startup_s) as cluster:
        to_c = cluster.proxy("S2-C", "S2")
        to_c2 = cluster.proxy("S2-C2", "S2")
        s1 = cluster.location("S1")
        cluster.start(
            {
                "S1": _source("a", t, ["C", "C2"]),
                "S2": _source("b", t, ["C", "C2"]),
                "C": _fragment(
                    t,
                    window,
                    {"s1": {"S1": s1}, "s2": {"S2": to_c.location}},
                    fragment="C",
                    peers={"C2": cluster.location("C2")},
                    registry=registry.get("C"),
                ),
                "C2": _fragment(
                    t,
                    window,
                    {"s1": {"S1": s1}, "s2": {"S2": to_c2.location}},
                    fragment="C",
                    peers={"C": cluster.location("C")},
                    registry=registry.get("C2"),
                ),
            }
        )
        cluster.sleep_until(t.fail_at_ms)
        to_c.cut(t.cut_mode)  # type: ignore[arg-type]
        to_c2.cut(t.cut_mode)  # type: ignore[arg-type]
        failure_at = cluster.now_ms()
        seen_during_failure = None
        if during_failure is not None:
            # Past the delay budget (the replicas went tentative) and a report interval later.
            budget = round(0.9 * t.max_delay_ms)
            cluster.sleep_until(min(t.fail_at_ms + budget + 700, t.fail_at_ms + t.fail_for_ms))
            seen_during_failure = during_failure()
        cluster.sleep_until(t.fail_at_ms + t.fail_for_ms)
        heal_at = cluster.now_ms()
        to_c.heal()
        to_c2.heal()
        _wait_until_settled(cluster, ["C", "C2"], t, slack_s=30)
        status = cluster.status("C", full=True)
        status2 = cluster.status("C2")
        messages = cluster.output("C")
    expected = reference(
        [_rows(t, "a"), _rows(t, "b")],
        [WindowCount(t.window_ms, t.bucket_ms)],
        t.bucket_ms,
        t.cutoff_ms,
    )
    view = _view(messages)
    got = [r for r in view.stable if r.stime < t.cutoff_ms]
    latency = _latencies(status, t, failure_at)
    ours, theirs = _stabilizations(status["history"]), _stabilizations(status2["history"])
    return {
        "scenario": "tentative",
        "failure_at_ms": failure_at,
        "heal_at_ms": heal_at,
        "max_delay_ms": t.max_delay_ms,
        "strategy": t.strategy,
        "switches": _switches("C", status),
        "tentative_tuples": view.tentative_total,
        # Sent while the link was cut; the rest came from a replica waiting for its turn to
        # reconcile (it keeps processing, tentatively, until its peer is done).
        "tentative_before_heal": sum(1 for at in status["tentative_emits"] if at <= heal_at),
        "corrections": view.corrections,
        "undos": view.undos,
        "rec_dones": view.rec_dones,
        "stabilizations": {"C": ours, "C2": theirs},
        "history": {"C": status["history"], "C2": status2["history"]},
        "seen_during_failure": seen_during_failure,
        **latency,
        "consumer_loop_errors": status["errors"],
        "difference": _difference(expected, got),
        "checks": {
            "output_matches_reference": bool(expected) and got == expected,
            "consumer_loop_without_errors": status["errors"] == 0,
            "tentative_results_during_failure": view.tentative_total > 0,
            "added_latency_within_max_delay": (latency["max_added_latency_ms"] or 0)
            <= t.max_delay_ms,
            "corrected_after_heal": view.undos >= 1 and view.rec_dones >= 1 and not view.tentative,
            "replicas_never_reconcile_together": bool(ours and theirs)
            and not _overlap(ours, theirs),
        },
    }


# -- crash ----------------------------------------------------------------------------------
def _crash_configs(t: Timings, cluster: Cluster, technique: str) -> dict[str, dict[str, Any]]:
    """A -> B (windowed counts, stateful) -> C, with B2 as B's backup under ``technique``
    ("none": no backup at all, the baseline for runtime overhead)."""
    window = {"type": "window_count", "window_ms": t.window_ms}
    a = {"a": {"A": cluster.location("A")}}
    b_replicas = {"B": cluster.location("B")}
    consumers = ["B"] if technique == "none" else ["B", "B2"]
    configs: dict[str, dict[str, Any]] = {"A": _source("a", t, consumers)}
    if technique == "passive_standby":
        configs["B"] = _fragment(
            t,
            window,
            a,
            fragment="B",
            checkpoint_to=cluster.location("B2"),
            checkpoint_every_ms=t.checkpoint_every_ms,
        )
    else:
        configs["B"] = _fragment(t, window, a, fragment="B")
    if technique == "active_standby":
        configs["B2"] = _fragment(t, window, a, fragment="B")
        b_replicas["B2"] = cluster.location("B2")
    elif technique != "none":
        configs["B2"] = {**_fragment(t, window, a, fragment="B"), "role": "standby"}
    configs["C"] = _fragment(t, {"type": "passthrough"}, {"b": b_replicas})
    return configs


def run_steady(t: Timings, workdir: Path, technique: str) -> dict[str, Any]:
    """No failure: what a technique costs while all is well (CPU of every node process over
    the run, and C's latency), to compare with ``technique="none"`` in the same run."""
    if technique not in ("none", *TECHNIQUES):
        raise ValueError(f"steady: technique must be none or one of {TECHNIQUES}")
    with Cluster(workdir, startup_seconds=t.startup_s) as cluster:
        configs = _crash_configs(t, cluster, technique)
        cluster.start(configs)
        start_cpu = {name: cluster.cpu_seconds(name) for name in configs}
        cluster.sleep_until(t.duration_ms)
        cpu = {name: cluster.cpu_seconds(name) - start_cpu[name] for name in configs}
        status = cluster.status("C", full=True)
    latency = _latencies(status, t, None)
    return {
        "technique": technique,
        "cpu_seconds": cpu,
        "total_cpu_seconds": sum(cpu.values()),
        "median_latency_ms": latency["baseline_latency_ms"],
        "rows_out": len(status["first_emit"]),
    }


def run_crash(
    t: Timings,
    workdir: Path,
    technique: str,
    coordinator: MovementCoordinator | None = None,
) -> dict[str, Any]:
    """``coordinator``: the registry (``registry_coordinator.RegistryCoordinator``) or, by
    default, its in-memory stand-in; fragment "B" is hosted by participant "B" and fails over
    to participant "B2"."""
    if technique not in TECHNIQUES:
        raise ValueError(f"crash: technique must be one of {TECHNIQUES}, got {technique!r}")
    if coordinator is None:
        coordinator = InMemoryCoordinator({"B": "B"})
    with Cluster(workdir, startup_seconds=t.startup_s) as cluster:
        configs = _crash_configs(t, cluster, technique)
        cluster.start(configs)
        cluster.sleep_until(t.fail_at_ms)
        boundary_before = cluster.status("C")["inputs"]["b"]["boundary"] or 0
        shipped = cluster.status("B")["shipped_bytes"]
        cluster.kill("B")
        failure_at = cluster.now_ms()
        # The registry's failure detector: heartbeats to B every interval, failed after misses.
        detector = FailureDetector(time.monotonic, interval=t.heartbeat_ms / 1000, misses=t.misses)
        detector.heard("B")
        wait_until_failed(
            detector,
            "B",
            lambda _peer, timeout: cluster.call("B", "dpc_state", timeout=timeout),
        )
        detected_at = cluster.now_ms()
        move = coordinator.prepare("B", "B", "B2", "failover")
        if technique == "upstream_backup":
            acks = cluster.call("A", "dpc_info", stream="out")["acks"]
            take = {"mode": "replay", "replay_from_ms": int(acks.get("B", 0))}
        elif technique == "passive_standby":
            take = {"mode": "checkpoint"}
        else:
            take = {"mode": "active"}
        if take["mode"] != "active":
            cluster.control("B2", cmd="take_over", epoch=move.epoch, **take)
        else:
            cluster.control("B2", cmd="promote", epoch=move.epoch)
        epoch = coordinator.commit(move.movement_id)
        # Fence: C no longer accepts B's stream below the new epoch, wherever B reappears.
        cluster.control(
            "C",
            cmd="set_inputs",
            inputs={"b": {"replicas": {"B2": cluster.location("B2")}, "min_epoch": epoch}},
        )
        taken_over_at = cluster.now_ms()

        def recovered() -> bool:
            boundary = cluster.status("C")["inputs"]["b"]["boundary"] or 0
            return boundary > max(boundary_before, failure_at)

        _wait(cluster, recovered, 20, "C's input to advance again")
        recovered_at = cluster.now_ms()
        _wait_until_settled(cluster, ["C"], t)
        status = cluster.status("C", full=True)
        b2 = cluster.status("B2")
        messages = cluster.output("C")
    expected = reference(
        [_rows(t, "a")],
        [WindowCount(t.window_ms, t.bucket_ms), Passthrough()],
        t.bucket_ms,
        t.cutoff_ms,
    )
    view = _view(messages)
    got = [r for r in view.stable if r.stime < t.cutoff_ms]
    link = status["inputs"]["b"]
    return {
        "scenario": "crash",
        "technique": technique,
        "failure_at_ms": failure_at,
        "detected_at_ms": detected_at,
        "taken_over_at_ms": taken_over_at,
        "recovered_at_ms": recovered_at,
        "recovery_ms": recovered_at - failure_at,
        "heal_at_ms": None,
        "movement": {"id": move.movement_id, "reason": move.reason, "epoch": epoch},
        "take_over": [e for e in b2["events"] if e["event"] == "take_over"],
        # Passive standby: checkpoint bytes B shipped to B2 before it died, full vs delta.
        "checkpoint_bytes_shipped": shipped,
        "switches": _switches("C", status),
        "tentative_tuples": view.tentative_total,
        "corrections": view.corrections,
        "input_duplicates": link["duplicates"],
        **_latencies(status, t, failure_at),
        "consumer_loop_errors": status["errors"],
        "difference": _difference(expected, got),
        "checks": {
            "output_matches_reference": bool(expected) and got == expected,
            "consumer_loop_without_errors": status["errors"] == 0,
            "no_duplicates": link["duplicates"] == 0 and view.duplicates == 0,
            "failover_committed": coordinator.host("B") == "B2"
            and coordinator.current_epoch("B") == epoch == move.epoch,
            "consumer_on_new_host": link["current"] == "B2",
        },
    }


def run(
    name: str,
    report_dir: Path,
    timings: Timings | None = None,
    *,
    techniques: Sequence[str] = TECHNIQUES,
) -> dict[str, Any]:
    """Run a scenario, write ``report_dir/report.json``; the report's ``ok`` says all passed."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    t = timings or Timings()
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    if name == "partition":
        report = run_partition(t, report_dir / "nodes")
    elif name == "tentative":
        report = run_tentative(t, report_dir / "nodes")
    else:  # crash (the name was checked above)
        runs = {tech: run_crash(t, report_dir / "nodes" / tech, tech) for tech in techniques}
        report = {
            "scenario": "crash",
            "techniques": runs,
            "checks": {
                f"{tech}.{check}": passed
                for tech, result in runs.items()
                for check, passed in result["checks"].items()
            },
        }
        report["checks"]["output_matches_reference"] = all(
            r["checks"]["output_matches_reference"] for r in runs.values()
        )
    report["engine"] = "python model"
    report["timings"] = asdict(t)
    report["ok"] = all(report["checks"].values())
    (report_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


__all__ = [
    "SCENARIOS",
    "TECHNIQUES",
    "Timings",
    "reference",
    "replace",
    "run",
]
