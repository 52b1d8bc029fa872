"""DPC on Spark in wall-clock time: a live two-input query, one input cut off, then healed.

python -m spark_jobs.ha.spark_dpc [--failures 2,5] [--mode cut|withhold] [--cut refuse|drop]
    [--budget adaptive|fixed] [--redo yields|free] [--windows 2,10] [--rate 40]
    [--strategies delay_each,delay_first]
    [--json FILE] [--progress-log FILE]

Two producers publish one bucket of connection records per second as the wall clock passes its
end (a live source). The failure lasts ``failure`` seconds from second ``fail_at``:

- ``cut`` (the default): the fragment reads B through a fault-injecting TCP proxy
  (``spark_jobs/ha/faultproxy.py``), which is cut half a second before B publishes second
  ``fail_at`` and healed half a second after it published the last second of the failure. B goes
  on publishing into its own log; the Spark fragment cannot reach it (``refuse``: connections
  reset, ``drop``: silence until the calls' deadline). This is the real thing: the SUnion
  source must survive unreachable Flight calls on the driver and in read().
- ``withhold``: B holds its buckets back (its output log sees no rows and no BOUNDARY), then
  sends them all; the network stays up (the earlier simulation, kept for comparison).

The fragment
(distinct ports per source and 2 s window, stateful) runs on Spark as a DPC node
(``spark_jobs/runtime/dpc.py``) with X = 3 s; a poller reconciles after the heal. Per run:

- ``tentative_tuples``, ``corrections``, ``undos``;
- ``max_added_latency_s``, the paper's measure ("new tuples processed within X", whenever
  input is available): for each input bucket, when the first batch that processed it (tentative
  or stable) was sent, minus when the bucket ended on the clock; the maximum over the run minus
  ``baseline_latency_s``, the median of the same before the failure;
- ``max_added_row_latency_s``: the same per output row (first sent minus its window's end),
  which also counts corrections: a corrected row is a new row, first sent at the switch, so this
  one grows with the failure's length by construction;
- ``reconciliation_s``: from the heal being noticed to REC_DONE: a redo copy of the query runs
  from the all-stable checkpoint while the serving one goes on, then the switch (UNDO and the
  held corrections) and the redo past the last tentative bucket; ``redo_catch_up_s`` is the part
  before the switch;
- ``output_matches_reference``: the stable output equals a failure-free run of the same input.

``--budget adaptive`` (the default): the delay budget is X minus the median recent batch and a
trigger interval, capped at 0.9 X (``DPCSettings.adaptive_budget``), so that a bucket released
at its deadline still leaves within X when batches are slow; ``fixed`` is 0.9 X.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pyspark.sql import SparkSession

from app.availability.states import NodeState
from app.availability.sunion import DelayStrategy
from app.availability.tuples import Kind
from spark_jobs.fragments import CONNECTION_SCHEMA, distinct_port_counts
from spark_jobs.generators import ConnectionGenerator, RateSchedule
from spark_jobs.ha.faultproxy import CutMode, FaultProxy
from spark_jobs.runtime import FragmentRuntime, FragmentSpec, StreamClient, StreamRef, publish
from spark_jobs.runtime.dpc import DPCFragment, DPCSettings
from spark_jobs.runtime.listeners import ProgressListener
from spark_jobs.runtime.transport import StreamServer

BUCKET = 1.0
WINDOW = 2
RATE = 40


class ProgressLog(ProgressListener):
    """Each trigger's progress as one JSON line: where a slow bucket's time went (planning in
    ``latestOffset``, the batch in ``addBatch``, the commit) is in ``durationMs``."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("w")

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        line = {
            "at": time.time(),
            "query": progress.name,
            "batch": progress.batchId,
            "rows": progress.numInputRows,
            "duration_ms": dict(progress.durationMs),
            "end_offset": progress.sources[0].endOffset if progress.sources else None,
        }
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()


def sources(rate: int = RATE) -> tuple[ConnectionGenerator, ConnectionGenerator]:
    """The two producers' records: ``rate`` connections/s each, plus 4 scans/s per scanner."""
    if rate <= 0:
        raise ValueError(f"spark_dpc: rate must be positive, got {rate}")
    return (
        ConnectionGenerator(seed=21, schedule=RateSchedule.constant(rate), scan_rate=4),
        ConnectionGenerator(seed=22, schedule=RateSchedule.constant(rate), scan_rate=4),
    )


SOURCE_A, SOURCE_B = sources()
FailureMode = Literal["cut", "withhold"]


def _spec(
    name: str, a: StreamRef, b: StreamRef, out: StreamRef, window: int = WINDOW
) -> FragmentSpec:
    # The window sets the state: one port set per (open window, source IP).
    return FragmentSpec(
        name=name,
        build=functools.partial(distinct_port_counts, window_seconds=window, threshold=3),
        input_schema=CONNECTION_SCHEMA,
        inputs=(a, b),
        output=out,
        bucket_seconds=BUCKET,
        trigger_seconds=0.2,
        max_buckets_per_batch=3,
    )


def _declared(server: StreamServer, *streams: str) -> StreamClient:
    client = StreamClient(server.location)
    for stream in streams:
        client.declare(stream, BUCKET)
    return client


def _rows(server: StreamServer, stream: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in server.log.table(stream).to_pylist())


def _second(stime: Any, epoch_ms: int) -> float:
    return round(stime.timestamp() - epoch_ms / 1000, 3)


def reference(
    spark: SparkSession, root: Path, seconds: int, *, window: int = WINDOW, rate: int = RATE
) -> list[tuple[Any, ...]]:
    a, b, home = StreamServer(), StreamServer(), StreamServer()
    # A directory per run: a leftover checkpoint would make the next reference resume.
    host = FragmentRuntime("reference", spark, root / f"reference-{seconds}-{window}-{rate}")
    source_a, source_b = sources(rate)
    try:
        with _declared(a, "a") as ca, _declared(b, "b") as cb:
            publish(ca, "a", source_a.seconds(0, seconds), BUCKET)
            publish(cb, "b", source_b.seconds(0, seconds), BUCKET)
        _declared(home, "out").close()
        spec = _spec(
            "ref",
            StreamRef(a.location, "a"),
            StreamRef(b.location, "b"),
            StreamRef(home.location, "out"),
            window,
        )
        host.start(spec, epoch=0).processAllAvailable()
        host.stop("ref")
        return _rows(home, "out")
    finally:
        host.close()
        for server in (a, b, home):
            server.shutdown()


def _produce(
    a: StreamServer,
    b: StreamServer,
    t0: float,
    seconds: int,
    fail_at: int,
    failure: int,
    stop: threading.Event,
    withhold: bool = True,
    rate: int = RATE,
) -> None:
    """Publish second s of each source once the wall clock passes t0 + s + 1 (its end); with
    ``withhold``, B holds back the seconds of the failure until it ends."""
    held: list[int] = []
    source_a, source_b = sources(rate)
    with StreamClient(a.location) as ca, StreamClient(b.location) as cb:
        for second in range(seconds):
            if stop.wait(max(0.0, t0 + second + 1 - time.time())):
                return
            publish(ca, "a", source_a.second(second), BUCKET)
            if withhold and fail_at <= second < fail_at + failure:
                held.append(second)
            else:
                for late in held:
                    publish(cb, "b", source_b.second(late), BUCKET)
                held.clear()
                publish(cb, "b", source_b.second(second), BUCKET)


def _cut_and_heal(
    proxy: FaultProxy,
    mode: CutMode,
    cut_at: float,
    heal_at: float,
    times: dict[str, float],
    stop: threading.Event,
) -> None:
    if stop.wait(max(0.0, cut_at - time.time())):
        return
    proxy.cut(mode)
    times["failure_at"] = time.time()
    if stop.wait(max(0.0, heal_at - time.time())):
        return
    # Before the heal: traffic may flow from the moment heal() begins (a heal is not atomic).
    times["heal_at"] = time.time()
    proxy.heal()


def run(
    spark: SparkSession,
    root: Path,
    *,
    failure: int,
    strategy: DelayStrategy,
    expected: list[tuple[Any, ...]],
    seconds: int,
    fail_at: int = 4,
    max_delay: float = 3.0,
    mode: FailureMode = "cut",
    cut_mode: CutMode = "drop",
    adaptive_budget: bool = False,
    redo_yields: bool = True,
    window: int = WINDOW,
    rate: int = RATE,
) -> dict[str, Any]:
    if mode not in ("cut", "withhold"):
        raise ValueError(f"spark_dpc.run: mode must be 'cut' or 'withhold', got {mode!r}")
    a, b, home = StreamServer(), StreamServer(), StreamServer()
    host = FragmentRuntime(
        f"dpc-{strategy}-{failure}", spark, root / f"{mode}-{strategy}-{failure}-{window}-{rate}"
    )
    stop = threading.Event()
    producer: threading.Thread | None = None
    cutter: threading.Thread | None = None
    # The link from B to the fragment: all of B's traffic to it goes through here.
    proxy = FaultProxy(b.port) if mode == "cut" else None
    times: dict[str, float] = {}
    try:
        _declared(a, "a").close()
        _declared(b, "b").close()
        _declared(home, "out").close()
        epoch_ms = round(SOURCE_A.epoch.timestamp() * 1000)
        # The query warms up before the first bucket ends; stime 0 of the data is wall t0.
        t0 = time.time() + 3.0
        settings = DPCSettings(
            max_delay,
            strategy=strategy,
            clock_offset_ms=round(t0 * 1000) - epoch_ms,
            adaptive_budget=adaptive_budget,
            redo_yields=redo_yields,
        )
        spec = _spec(
            "ports",
            StreamRef(a.location, "a"),
            StreamRef(proxy.location if proxy is not None else b.location, "b"),
            StreamRef(home.location, "out"),
            window,
        )
        node = DPCFragment(host, spec, settings, epoch=0)
        node.start(replay_from=round(epoch_ms / 1000 / BUCKET))
        producer = threading.Thread(
            target=_produce,
            args=(a, b, t0, seconds, fail_at, failure, stop, proxy is None, rate),
            daemon=True,
        )
        producer.start()
        if proxy is not None:
            # Second s is published at t0 + s + 1: cut before fail_at's, heal after the last's.
            cut_at, heal_at = t0 + fail_at + 0.5, t0 + fail_at + failure + 0.5
            cutter = threading.Thread(
                target=_cut_and_heal,
                args=(proxy, cut_mode, cut_at, heal_at, times, stop),
                daemon=True,
            )
            cutter.start()
        else:
            # Withholding: B's first held bucket would have gone at t0 + fail_at + 1.
            times["failure_at"] = t0 + fail_at + 1
            times["heal_at"] = t0 + fail_at + failure + 1
        healed_at: float | None = None
        # The redo replays the whole failure (and yields to the serving query): a long failure
        # needs longer than a fixed minute after the input ends.
        deadline = t0 + seconds + 60 + 2 * failure
        while time.time() < deadline:
            if node.poll() and healed_at is None:
                healed_at = node.reconciliations[-1]["began"]
            done = not producer.is_alive() and node.state is NodeState.STABLE
            if done and node.sink.processed_end == round(epoch_ms / 1000) + seconds:
                break
            time.sleep(0.1)
        node.query().processAllAvailable()
        messages = node.sink.messages
        offset_s = settings.clock_offset_ms / 1000
        start_bucket = round(epoch_ms / 1000 / BUCKET)
        first_bucket_sent: dict[int, float] = {}
        low = start_bucket
        for record in sorted(node.sink.batches, key=lambda r: r.sent_at):
            if record.end_bucket is None:
                continue
            for bucket in range(low, record.end_bucket):
                first_bucket_sent.setdefault(bucket, record.sent_at)
            low = max(low, record.end_bucket)
        # A bucket ends on the clock at stime (bucket + 1) * BUCKET, i.e. wall time + offset.
        processing = {
            b: sent - ((b + 1) * BUCKET + offset_s) for b, sent in first_bucket_sent.items()
        }
        steady = [v for b, v in processing.items() if b - start_bucket < fail_at]
        baseline = statistics.median(steady) if steady else 0.0
        first_sent: dict[tuple[int, str], float] = {}
        for sent, message in messages:
            if message.row is not None:
                first_sent.setdefault(message.row.key, sent)
        latency = {key: sent - (key[0] / 1000 + offset_s) for key, sent in first_sent.items()}
        before = [v for k, v in latency.items() if k[0] / 1000 - epoch_ms / 1000 <= fail_at]
        row_baseline = statistics.median(before) if before else 0.0
        got = _rows(home, "out")
        rec_done = [sent for sent, m in messages if m.kind is Kind.REC_DONE]
        heal_time = times.get("heal_at")
        return {
            "failure_s": failure,
            # Wall time of stime 0 of the data: reports give times relative to it.
            "t0": t0,
            "mode": mode if proxy is None else f"cut:{cut_mode}",
            "strategy": str(strategy),
            "failure_at": times.get("failure_at"),
            "heal_at": heal_time,
            "tentative_before_heal": sum(
                1
                for sent, m in messages
                if m.kind is Kind.TENTATIVE and heal_time is not None and sent <= heal_time
            ),
            "rec_dones": len(rec_done),
            "max_delay_s": max_delay,
            "tentative_tuples": sum(1 for _, m in messages if m.kind is Kind.TENTATIVE),
            "corrections": node.sink.rules.corrections_sent,
            "undos": node.sink.rules.undos_sent,
            "tentative_batches": node.sink.tentative_batches,
            "baseline_latency_s": round(baseline, 3),
            "max_latency_s": round(max(processing.values()), 3) if processing else None,
            "max_added_latency_s": (
                round(max(processing.values()) - baseline, 3) if processing else None
            ),
            "baseline_row_latency_s": round(row_baseline, 3),
            "max_added_row_latency_s": (
                round(max(latency.values()) - row_baseline, 3) if latency else None
            ),
            "reconciliation_s": (
                round(rec_done[-1] - healed_at, 3) if rec_done and healed_at else None
            ),
            # From the redo copy's start to the switch (UNDO): the serving query went on.
            "redo_catch_up_s": (
                round(node.reconciliations[-1]["switched"] - healed_at, 3)
                if node.reconciliations and "switched" in node.reconciliations[-1] and healed_at
                else None
            ),
            "final_state": str(node.state),
            "window_s": window,
            "rate": rate,
            "redo_yields": redo_yields,
            # Seconds the redo spent paused for the serving query (yield_redo).
            "redo_paused_s": round(node.redo_paused_s, 3),
            # Redo copies whose query died and were started again.
            "redo_failures": node.redo_failures,
            # State at the heal: the packed all-stable checkpoint and the state store's rows.
            "checkpoint_bytes": (
                int(node.reconciliations[0]["checkpoint_bytes"]) if node.reconciliations else None
            ),
            "state_rows": (
                int(node.reconciliations[0]["state_rows"]) if node.reconciliations else None
            ),
            "budget": "adaptive" if adaptive_budget else "fixed",
            # Adaptive: the lowest budget the poller set (ms); fixed: 0.9 X.
            "min_budget_ms": min((b for _, b in node.budgets), default=settings.delay_budget_ms),
            "history": [[str(state), at] for state, at in node.sink.history],
            "output_matches_reference": got == expected,
            # Where they differ, by window end (seconds into the run): the diagnosis.
            "missing_windows": sorted({_second(r[0], epoch_ms) for r in expected if r not in got}),
            "extra_windows": sorted({_second(r[0], epoch_ms) for r in got if r not in expected}),
            "batches": [dataclasses.asdict(b) for b in node.sink.batches],
        }
    finally:
        stop.set()
        for thread in (producer, cutter):
            if thread is not None:
                thread.join()
        host.close()
        if proxy is not None:
            proxy.close()
        for server in (a, b, home):
            server.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--failures", default="2,5", help="failure durations, seconds")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--mode", choices=["cut", "withhold"], default="cut", help="how B fails (see above)"
    )
    parser.add_argument(
        "--cut", choices=["refuse", "drop"], default="drop", help="cut mode of the proxy"
    )
    parser.add_argument(
        "--budget",
        choices=["adaptive", "fixed"],
        default="adaptive",
        help="delay budget: X minus the measured batch time (capped at 0.9 X), or 0.9 X",
    )
    parser.add_argument(
        "--redo",
        choices=["yields", "free"],
        default="yields",
        help="the redo copy pauses while the serving query needs the cores, or runs freely",
    )
    parser.add_argument(
        "--windows",
        default=str(WINDOW),
        help="window sizes, seconds (the state grows with the window: reconciliation vs state)",
    )
    parser.add_argument("--rate", type=int, default=RATE, help="connections/s per producer")
    parser.add_argument(
        "--strategies",
        default=",".join(str(s) for s in DelayStrategy),
        help="delay strategies to run (delay_each, delay_first)",
    )
    parser.add_argument(
        "--progress-log",
        type=Path,
        default=None,
        help="write every query's progress (phase durations per trigger) here as JSON lines",
    )
    args = parser.parse_args(argv)
    failures = [int(f) for f in args.failures.split(",")]
    windows = [int(w) for w in args.windows.split(",")]
    strategies = [DelayStrategy(s) for s in args.strategies.split(",")]
    if any(f <= 0 for f in failures) or any(w <= 0 for w in windows):
        parser.error(f"--failures and --windows must be positive: {failures}, {windows}")
    from spark_jobs.session import build_session

    spark = build_session(app_name="spark-dpc", master="local[2]", shuffle_partitions=2)
    if args.progress_log is not None:
        spark.streams.addListener(ProgressLog(args.progress_log))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for window, failure in ((w, f) for w in windows for f in failures):
            # Past the failure, long enough for the last window to close.
            seconds = 4 + failure + 3 + window
            expected = reference(spark, root, seconds, window=window, rate=args.rate)
            for strategy in strategies:
                result = run(
                    spark,
                    root,
                    failure=failure,
                    strategy=strategy,
                    expected=expected,
                    seconds=seconds,
                    mode=args.mode,
                    cut_mode=args.cut,
                    adaptive_budget=args.budget == "adaptive",
                    redo_yields=args.redo == "yields",
                    window=window,
                    rate=args.rate,
                )
                brief = {k: v for k, v in result.items() if k not in ("batches", "history")}
                print(json.dumps(brief), flush=True)
                results.append(result)
    spark.stop()
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["output_matches_reference"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
