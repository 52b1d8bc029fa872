"""The ``partition`` scenario on Spark: the Borealis partition demonstration with Spark fragments.

A (producer process, Flight log ``conns``) feeds B and R, two Spark host processes running the
same stateful fragment (``connection_counts`` per 2 s window); R is B's
replica. Each host keeps its output log ``out`` on its own Flight server, the producer side of a
link, as a participant does. C, the consumer (in the driver), reaches B and R each through its
own ``FaultProxy``, so the B-C link can be cut for real (TCP held or reset) while B, R and A keep
running and every other link stays up.

C's two activities, both only through the proxies:
- heartbeats: one thread per replica pings the replica's heartbeat responder every heartbeat
  interval; an answer is a heartbeat to ``app.availability.detector.FailureDetector``, which
  declares the replica failed after ``misses`` silent intervals. The responder is a small
  process of the host's (``spark_jobs.ha.heartbeat``: it dies with the host) on a port of its
  own, reached through a second proxy of the same link that is cut and healed with the data
  proxy. Asking the host's Flight server (``info``) instead, as this scenario first did, needs
  the host's GIL, which its Spark work holds for more than 300 ms at times: a healthy B was
  declared failed before any cut at the designed 100 ms x 3 (measured in
  ``bench/ha/heartbeat_starvation.py``);
- reading: C reads complete buckets only (below the stream's BOUNDARY), in order, from the
  replica ``app.availability.upstream.UpstreamSelector`` chooses; a failed replica is
  unreachable to the selector. The hosts run no DPC, so every reachable replica is STABLE: the
  selector moves C only when its replica fails, and keeps it on R after the heal (R is as good
  as B, and a switch costs a resynchronisation).
On a switch C asks the new replica for the buckets from its own next bucket on: both replicas
compute the same windows from the same input (deterministic fragment, one input serialised by
SUnion), so resuming at the bucket offset gives neither duplicates nor gaps. The switch opens a
new stream version; each delivered row records the version it came through.

Run: the processes start (R computes the failure-free reference meanwhile, B warms up, both as
in ``spark_stage.Stage``); B and R start the fragment; A publishes one bucket per second; once C
has rows from B, the B-C proxy is cut for ``fail_for_s``, then healed; the run ends when C has
every bucket the input completes. Checks: one switch B -> R after the cut, C still on R after
the heal although B answers heartbeats again, no key delivered twice, nothing missing, C's output
equal to the reference, and B's own log equal to R's (B kept working: a partition, not a crash).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

import pyarrow.flight as flight

from app.availability.detector import FailureDetector, PeerStatus
from app.availability.states import NodeState
from app.availability.upstream import ReplicaView, UpstreamSelector
from spark_jobs.ha.faultproxy import CutMode, FaultProxy
from spark_jobs.ha.heartbeat import HeartbeatClient, port_of
from spark_jobs.ha.spark_control import ActionClient
from spark_jobs.ha.spark_host import BUCKET_S, first_bucket, generator, output_rows
from spark_jobs.ha.spark_stage import (
    FRAGMENT,
    Row,
    Stage,
    StageTimings,
    fragment_plan,
    latencies,
    wait_until,
)
from spark_jobs.runtime.transport import StreamClient

OUTPUT = "out"
REPLICAS = ("B", "R")
CUT_MODES = ("drop", "refuse")


@dataclass(frozen=True)
class SparkPartitionTimings(StageTimings):
    """The stage's timings (seconds of input, window, heartbeats, start-up) plus the cut."""

    seconds: int = 14
    fail_at_s: float = 5.0
    fail_for_s: float = 4.0
    # "drop": a partition (bytes held, the peer hears nothing); "refuse": connections reset.
    cut_mode: str = "drop"

    def __post_init__(self) -> None:
        if self.cut_mode not in CUT_MODES:
            raise ValueError(
                f"SparkPartitionTimings.cut_mode must be one of {CUT_MODES}, got {self.cut_mode!r}"
            )
        if self.fail_at_s + self.fail_for_s >= self.seconds:
            raise ValueError(
                "SparkPartitionTimings: the heal (fail_at_s + fail_for_s = "
                f"{self.fail_at_s + self.fail_for_s}) must come before the input ends "
                f"(seconds = {self.seconds}), or 'stays after the heal' is not observed"
            )

    @classmethod
    def quick(cls) -> SparkPartitionTimings:
        # 14 s: the cut waits for C's first rows, which a loaded machine delays by seconds, and
        # C must still read from R after the heal.
        return cls(seconds=14, fail_at_s=4.0, fail_for_s=3.5)


def timings_like(t: Any) -> SparkPartitionTimings:
    """The Spark run for the python engine's ``Timings``: the same heartbeats, cut mode and
    failure length; quick or not. The input covers the failure and 4 s after the heal, in whole
    windows (Spark needs 1 s buckets and seconds of warm-up, so the rest does not carry over)."""
    from spark_jobs.ha.scenarios import Timings

    quick = t.duration_ms <= Timings.quick().duration_ms
    base = SparkPartitionTimings.quick() if quick else SparkPartitionTimings()
    fail_for_s = t.fail_for_ms / 1000
    needed = int(base.fail_at_s + fail_for_s) + 4
    seconds = max(base.seconds, needed + needed % base.window_s)
    return replace(
        base,
        heartbeat_ms=t.heartbeat_ms,
        misses=t.misses,
        cut_mode=t.cut_mode,
        fail_for_s=fail_for_s,
        seconds=seconds,
    )


def _port(location: str) -> int:
    return int(location.rsplit(":", 1)[1])


class Link:
    """C's end of its link to one replica, through the replica's proxy; every call has a
    deadline, because across a dropped link one without would wait for the heal."""

    def __init__(self, proxy: FaultProxy, stream: str, timeout: float) -> None:
        self.stream = stream
        self._client = StreamClient(proxy.location, timeout=timeout)

    def info(self) -> dict[str, Any]:
        return self._client.info(self.stream)

    def read(self, lo: int, hi: int) -> list[Row]:
        return output_rows(self._client.read(self.stream, lo, hi).read_all())

    def close(self) -> None:
        self._client.close()


class PartitionConsumer:
    """C: heartbeats to each replica, complete buckets in order from the chosen one."""

    def __init__(
        self,
        proxies: dict[str, FaultProxy],
        heartbeat_proxies: dict[str, FaultProxy],
        stream: str,
        start_bucket: int,
        heartbeat_s: float,
        misses: int,
    ) -> None:
        self.proxies = proxies
        self.heartbeat_proxies = heartbeat_proxies
        self.stream = stream
        self.names = tuple(proxies)
        self.interval = heartbeat_s
        # A late answer still counts as a heartbeat when it comes: the deadline is the whole
        # time the detector waits, so a slow but live replica is not declared failed by it.
        self.deadline = heartbeat_s * misses
        self.detector = FailureDetector(time.monotonic, interval=heartbeat_s, misses=misses)
        # The primary first: it is chosen while both are equally good.
        self.selector = UpstreamSelector(stream, self.names, current=self.names[0])
        self.next = start_bucket
        self.delivered: dict[tuple[int, str], Row] = {}
        self.first_seen: dict[tuple[int, str], float] = {}
        self.version_of: dict[tuple[int, str], int] = {}
        self.duplicates: list[tuple[int, str]] = []
        self.switches: list[dict[str, Any]] = []
        # Per replica, the first answer after a silence the detector called a failure.
        self.back_at: dict[str, list[float]] = {name: [] for name in self.names}
        # Per replica, when each heartbeat answer came (for the longest silence on a live link).
        self.heard_at: dict[str, list[float]] = {name: [] for name in self.names}
        # Per replica, each unanswered heartbeat: when, and how it failed (what a replica that
        # is not heard again after a heal was doing: refused, reset or silent).
        self.ping_failures: dict[str, list[tuple[float, str]]] = {n: [] for n in self.names}
        # A replica is failed only once a heartbeat C sent went unanswered to the end of the
        # detector's window (app.availability.detector's one rule): a starved C (its heartbeat
        # thread not scheduled for 400 ms at CI load, the answer waiting in its socket) judged
        # by the clock alone once blamed a live replica; a miss is what C saw go unanswered.
        self.status_log: list[dict[str, Any]] = []
        self.read_errors: dict[str, int] = dict.fromkeys(self.names, 0)
        self.errors: list[str] = []
        self._status: dict[str, PeerStatus] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._heartbeats, args=(name,), daemon=True)
            for name in self.names
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
            thread.join(timeout=5)

    @property
    def current(self) -> str:
        return self.selector.current or self.names[0]

    def _heartbeats(self, name: str) -> None:
        # To the replica's heartbeat responder, through the replica's own proxy for it: cut
        # with the data link (see ReplicaLink), answered whatever the host's Spark work does.
        link = HeartbeatClient(self.heartbeat_proxies[name].port)
        try:
            while not self._stop.wait(self.interval / 10):
                with self._lock:
                    due = self.detector.should_ping(name)
                if not due:
                    continue
                with self._lock:
                    timeout = self.detector.ping_timeout(name)
                try:
                    link.ping(timeout)
                except OSError as error:
                    with self._lock:
                        self.detector.missed(name)
                    self.ping_failures[name].append((time.time(), type(error).__name__))
                    continue
                with self._lock:
                    if self.detector.failed(name):
                        self.back_at[name].append(time.time())
                    self.detector.heard(name)
                    self.heard_at[name].append(time.time())
        finally:
            link.close()

    def _status_of(self, name: str) -> PeerStatus:
        return self.detector.status(name)

    def _read_loop(self) -> None:
        links = {
            name: Link(proxy, self.stream, self.deadline) for name, proxy in self.proxies.items()
        }
        try:
            while not self._stop.wait(0.05):
                try:
                    self._choose()
                    self._pull(links[self.current])
                except flight.FlightError as error:
                    # A read across a cut link: the heartbeats decide whether it failed.
                    self.read_errors[self.current] += 1
                    if not isinstance(
                        error, flight.FlightTimedOutError | flight.FlightUnavailableError
                    ):
                        self.errors.append(f"{type(error).__name__}: {error}")
                except Exception as error:
                    self.errors.append(f"{type(error).__name__}: {error}")
        finally:
            for link in links.values():
                link.close()

    def _choose(self) -> None:
        now = time.time()
        with self._lock:
            statuses = {name: self._status_of(name) for name in self.names}
            for name, status in statuses.items():
                if self._status.get(name) != status and status in (
                    PeerStatus.FAILED,
                    PeerStatus.ALIVE,
                ):
                    self.status_log.append({"replica": name, "status": str(status), "at": now})
                    self._status[name] = status
            views = [
                ReplicaView(name, NodeState.STABLE, statuses[name] is not PeerStatus.FAILED)
                for name in self.names
            ]
            switch = self.selector.decide(views, now)
        if switch is not None:
            self.switches.append(
                {
                    "from": switch.from_replica,
                    "to": switch.to_replica,
                    "at": switch.at,
                    "version": switch.version,
                    # Where C resumes on the new replica: its own next bucket, no earlier.
                    "resume_bucket": self.next,
                }
            )

    def _pull(self, link: Link) -> None:
        boundary = link.info()["boundary"]
        if boundary is None or boundary <= self.next:
            return
        rows = link.read(self.next, boundary)
        now = time.time()
        for row in rows:
            key = (row[0], row[2])
            if key in self.delivered:
                self.duplicates.append(key)
                continue
            self.delivered[key] = row
            self.first_seen[key] = now
            self.version_of[key] = self.selector.version
        self.next = boundary

    def output(self) -> list[Row]:
        return sorted(self.delivered.values())


def _log_rows(location: str) -> tuple[list[Row], int | None]:
    """A replica's own output log, read directly (not through C's proxy)."""
    with StreamClient(location) as client:
        return output_rows(client.read_table(OUTPUT)), client.info(OUTPUT)["boundary"]


def _direct_ping(location: str) -> str:
    """One heartbeat straight to a responder: its lease age, or how it failed."""
    client = HeartbeatClient(port_of(location))
    try:
        return f"answered, lease age {client.ping(1.0)} ms"
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    finally:
        client.close()


def _soon(done: Any, timeout: float) -> bool:
    """Wait for ``done``; False after ``timeout`` (the checks then say what did not happen)."""
    try:
        wait_until(done, timeout, "")
    except TimeoutError:
        return False
    return True


def run(
    report_dir: Path,
    timings: SparkPartitionTimings | None = None,
) -> dict[str, Any]:
    """One partition run; the report as the python engine's partition report (``scenario``,
    ``checks``, failure/heal times, ``tentative_tuples``, ``corrections``, ``switches``, the
    added latency), plus Spark's phases and the proxies' counters."""
    t = timings or SparkPartitionTimings()
    gen = generator(t.seed, t.rate)
    first = first_bucket(gen)
    epoch_s = gen.epoch.timestamp()
    last = first + t.seconds - 1
    stage = Stage(t, Path(report_dir) / "nodes", "active_standby", backup=REPLICAS[1])
    proxies: dict[str, FaultProxy] = {}
    heartbeat_proxies: dict[str, FaultProxy] = {}
    consumer: PartitionConsumer | None = None
    try:
        stage.wait()
        info, reference = stage.info, stage.reference
        source = info["A"]["location"]
        for name in REPLICAS:
            location = info[name]["location"]
            with StreamClient(location) as client:
                client.declare(OUTPUT, BUCKET_S)
            # Each replica acknowledges A under its own name, so A keeps input for both.
            plan = fragment_plan(t, source, [location, OUTPUT], f"{FRAGMENT}@{name}")
            with ActionClient(info[name]["control"]) as control:
                control.call("start", plan=plan, epoch=0, replay_from=first, timeout=120)
            proxies[name] = FaultProxy(_port(location))
            # The heartbeat responder's port is a second port of the same link: both proxies
            # are cut and healed together, as one cable would be.
            heartbeat_proxies[name] = FaultProxy(port_of(info[name]["heartbeat"]))
        t0 = time.time() + t.warmup_s
        with ActionClient(info["A"]["control"]) as a:
            a.call("play", t0=t0, seconds=t.seconds)
        consumer = PartitionConsumer(
            proxies, heartbeat_proxies, OUTPUT, first, t.heartbeat_ms / 1000, t.misses
        )
        consumer.start()
        time.sleep(max(0.0, t0 + t.fail_at_s - time.time()))
        # A cut mid-stream: C has rows from B (on a loaded machine that may come later).
        wait_until(lambda: bool(consumer and consumer.delivered), 120, "C's first rows from B")
        delivered_before_cut = len(consumer.delivered)
        for link in (proxies["B"], heartbeat_proxies["B"]):
            link.cut(cast(CutMode, t.cut_mode))  # validated by the timings
        failure_at = time.time()
        time.sleep(t.fail_for_s)
        # The heal's time is when traffic may flow again, taken before it: heal() connects the
        # connections it held one by one, and an answer through the first can come back before
        # the last is connected (taken after, B's first answer fell before "the heal" once and
        # "B heard again after the heal" failed although B answered at once).
        heal_at = time.time()
        for link in (proxies["B"], heartbeat_proxies["B"]):
            link.heal()
        wait_until(
            lambda: consumer.next > last - 1, t.settle_timeout_s, "C to pass the input's end"
        )
        # B must answer again for "stays with R" to be C's choice, not its only option.
        _soon(lambda: any(at > heal_at for at in consumer.back_at["B"]), 20)
        # B kept processing through the partition: its own log reaches the end too.
        _soon(lambda: (_log_rows(info["B"]["location"])[1] or 0) > last - 1, 60)
        consumer.stop()
        # B's responder asked directly, past the proxy: tells a silent responder from a link
        # that did not come back.
        b_direct = _direct_ping(info["B"]["heartbeat"])
        b_rows, b_boundary = _log_rows(info["B"]["location"])
        r_rows, r_boundary = _log_rows(info["R"]["location"])
        output = consumer.output()
        reference = reference or []
        # The switch the cut caused: B -> R at or after the cut (a false suspicion on a starved
        # machine can add others, before it; the check below then fails).
        moved = [
            s
            for s in consumer.switches
            if (s["from"], s["to"]) == ("B", "R") and s["at"] >= failure_at
        ]

        def ms(at: float) -> int:
            return round((at - t0) * 1000)

        switches = [
            {
                "consumer": "C",
                "stream": OUTPUT,
                "from": s["from"],
                "to": s["to"],
                "at_ms": ms(s["at"]),
                "version": s["version"],
                "resume_bucket": s["resume_bucket"] - first,
            }
            for s in consumer.switches
        ]
        by_version: dict[str, int] = {}
        replica_of = {0: "B", **{s["version"]: s["to"] for s in consumer.switches}}
        for version in consumer.version_of.values():
            label = f"{replica_of[version]} v{version}"
            by_version[label] = by_version.get(label, 0) + 1
        by_replica = {
            name: sum(n for label, n in by_version.items() if label.startswith(f"{name} "))
            for name in REPLICAS
        }
        # Replicas declared failed although their link was up: B before the cut, R ever.
        false_suspicions = [
            e
            for e in consumer.status_log
            if e["status"] == PeerStatus.FAILED and (e["replica"] != "B" or e["at"] < failure_at)
        ]
        missing = set(reference) - set(output)

        def longest_silence_ms(name: str) -> int | None:
            """The longest time between two answers while the link was up: B outside the cut
            (the heal's first answer excluded), R throughout."""
            times = consumer.heard_at[name] if consumer else []
            gaps = [
                b - a
                for a, b in itertools.pairwise(times)
                if name != "B" or b < failure_at or a > heal_at
            ]
            return round(max(gaps) * 1000) if gaps else None

        report: dict[str, Any] = {
            "scenario": "partition",
            "engine": "spark",
            "cut_mode": t.cut_mode,
            "failure_at_ms": ms(failure_at),
            "heal_at_ms": ms(heal_at),
            "switches": switches,
            "detected_after_ms": ms(moved[0]["at"]) - ms(failure_at) if moved else None,
            # No DPC on these hosts: a STABLE replica stayed reachable, so C read only stable,
            # complete buckets; nothing tentative was produced, nothing had to be corrected.
            "tentative_tuples": 0,
            "corrections": 0,
            "input_duplicates": len(consumer.duplicates),
            "delivered_before_cut": delivered_before_cut,
            "rows_out": len(output),
            "reference_rows": len(reference),
            "rows_by_version": by_version,
            "rows_by_replica": by_replica,
            "false_suspicions": len(false_suspicions),
            # What a false suspicion is measured against: interval x misses.
            "longest_silence_on_live_link_ms": {n: longest_silence_ms(n) for n in REPLICAS},
            "difference": {"missing": len(missing), "extra": len(set(output) - set(reference))},
            "replica_status_log": [
                {"replica": e["replica"], "status": e["status"], "at_ms": ms(e["at"])}
                for e in consumer.status_log
            ],
            # Rows C took from R once B was reachable again: what "stays with R" is about.
            "rows_after_heal": sum(1 for seen in consumer.first_seen.values() if seen > heal_at),
            "b_heard_again_after_heal_ms": next(
                (ms(at) - ms(heal_at) for at in consumer.back_at["B"] if at > heal_at), None
            ),
            "b_heartbeat_failures_after_heal": dict(
                Counter(kind for at, kind in consumer.ping_failures["B"] if at > heal_at)
            ),
            "b_direct_heartbeat": b_direct,
            "read_errors": consumer.read_errors,
            "consumer_errors": consumer.errors,
            "replica_boundaries": {"B": b_boundary, "R": r_boundary},
            "proxy_stats": {name: asdict(proxy.stats) for name, proxy in proxies.items()},
            "heartbeat_proxy_stats": {
                name: asdict(proxy.stats) for name, proxy in heartbeat_proxies.items()
            },
            "phases": stage.phases,
            "spark_timings": asdict(t),
            **latencies(consumer.first_seen, t0, epoch_s, failure_at),
        }
        report["checks"] = {
            "output_matches_reference": bool(reference) and output == reference,
            "switched_to_replica": len(consumer.switches) == 1 and len(moved) == 1,
            "stays_after_heal": consumer.current == "R"
            and report["b_heard_again_after_heal_ms"] is not None
            and report["rows_after_heal"] > 0,
            "no_duplicates": not consumer.duplicates
            and len(output) == len({(r[0], r[2]) for r in output}),
            "no_losses": not missing,
            "consumer_loop_without_errors": not consumer.errors,
            "replicas_agree": bool(b_rows) and b_rows == r_rows,
        }
        return report
    finally:
        if consumer is not None:
            consumer.stop()
        for proxy in (*proxies.values(), *heartbeat_proxies.values()):
            proxy.close()
        stage.close()
