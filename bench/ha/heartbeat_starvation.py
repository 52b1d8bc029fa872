"""What delays a Spark host's heartbeat answers: measured side by side on one running host.

PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
  .venv/bin/python -m bench.ha.heartbeat_starvation [--seconds 20] [--json FILE]

A producer A and a Spark host B (``spark_jobs.ha.spark_stage``'s processes, as the retired
``spark_partition`` driver ran them) run the partition scenario's stateful fragment on one
bucket per second. For ``--seconds``, every 100 ms this driver (a light process doing nothing
else) sends three heartbeats at once and times each answer:
- ``flight_info``: the ``info`` action of B's Flight server (what C's heartbeats were);
- ``control_ping``: the ``ping`` action of B's control server (what the old crash driver pinged);
- ``responder``: B's heartbeat responder process (``spark_jobs.ha.heartbeat``).
Meanwhile a thread inside B and a thread in this driver each sleep 5 ms at a time and record
every wake-up later than 50 ms (B needs its GIL to wake up; the driver's is free), and the
run-queue wait of B's Python threads (``/proc/<pid>/task/*/schedstat``: time runnable but not
on a CPU) is sampled every 100 ms. A slow answer that coincides with a late wake-up in B but not
in the driver, without a matching run-queue wait, is B's GIL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from spark_jobs.ha.heartbeat import HeartbeatClient, port_of
from spark_jobs.ha.spark_control import ActionClient
from spark_jobs.ha.spark_host import BUCKET_S, first_bucket, generator
from spark_jobs.ha.spark_stage import Processes, StageTimings, fragment_plan
from spark_jobs.runtime.transport import StreamClient

PATHS = ("flight_info", "control_ping", "responder")


def _runqueue_wait_s(pid: int) -> float:
    """Time B's Python threads spent runnable but waiting for a CPU, summed (seconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def _probe_local(seconds: float, out: list[tuple[float, float]]) -> None:
    end = time.monotonic() + seconds
    while (now := time.monotonic()) < end:
        time.sleep(0.005)
        late = time.monotonic() - now - 0.005
        if late > 0.05:
            out.append((time.time(), round(late, 4)))


def _summary(values: list[float | None]) -> dict[str, Any]:
    answered = sorted(v for v in values if v is not None)
    return {
        "sent": len(values),
        "unanswered_within_1s": len(values) - len(answered),
        "median_ms": round(statistics.median(answered) * 1000, 1) if answered else None,
        "p99_ms": round(answered[int(0.99 * (len(answered) - 1))] * 1000, 1) if answered else None,
        "max_ms": round(answered[-1] * 1000, 1) if answered else None,
        "over_100ms": sum(1 for v in answered if v > 0.1),
        "over_300ms": sum(1 for v in answered if v > 0.3),
    }


def measure(workdir: Path, seconds: float) -> dict[str, Any]:
    t = StageTimings()
    gen = generator(t.seed, t.rate)
    first = first_bucket(gen)
    procs = Processes(workdir)
    try:
        procs.spawn("A", "source", "--seed", str(t.seed), "--rate", str(t.rate))
        procs.spawn("B", "host", "--name", "B", "--root", str(workdir / "B"))
        info = procs.ready(t.startup_timeout_s)
        b_info = info["B"]
        with StreamClient(b_info["location"]) as client:
            client.declare("out", BUCKET_S)
        plan = fragment_plan(t, info["A"]["location"], [b_info["location"], "out"], "counts@B")
        control = ActionClient(b_info["control"])
        # Measured from the query's start: its first micro-batches (planning, code generation,
        # the state store, Python workers) are when the scenario saw heartbeats go unanswered.
        control.call("probe_stalls", seconds=seconds, timeout=10)
        local_stalls: list[tuple[float, float]] = []
        probe = threading.Thread(target=_probe_local, args=(seconds, local_stalls), daemon=True)
        probe.start()
        samples: dict[str, list[tuple[float, float | None]]] = {p: [] for p in PATHS}
        runqueue: list[tuple[float, float]] = []
        flight_link = StreamClient(b_info["location"])
        ping_link = ActionClient(b_info["control"])
        responder = HeartbeatClient(port_of(b_info["heartbeat"]))

        def timed(path: str, call: Any) -> None:
            began = time.time()
            try:
                call()
                samples[path].append((began, time.time() - began))
            except Exception:
                samples[path].append((began, None))

        calls = {
            "flight_info": lambda: flight_link.info("out"),
            "control_ping": lambda: ping_link.call("ping", timeout=1.0),
            "responder": lambda: responder.ping(1.0),
        }
        started: list[float] = []

        def start_query() -> None:
            control.call("start", plan=plan, epoch=0, replay_from=first, timeout=120)
            t0 = time.time() + t.warmup_s
            with ActionClient(info["A"]["control"]) as a:
                a.call("play", t0=t0, seconds=int(seconds) + 10)
            started.append(time.time())

        starter = threading.Thread(target=start_query, daemon=True)
        starter.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            tick = time.monotonic()
            runqueue.append((time.time(), _runqueue_wait_s(b_info["pid"])))
            threads = [threading.Thread(target=timed, args=(p, c)) for p, c in calls.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=1.5)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
        probe.join()
        starter.join()
        b_stalls = [tuple(s) for s in control.call("stalls", timeout=10)]
        # Each slow Flight answer (> 300 ms, a miss at the default) with what happened meanwhile.
        slow = []
        for began, took in samples["flight_info"]:
            if took is not None and took <= 0.3:
                continue
            ended = began + (took if took is not None else 1.0)
            waits = [w for at, w in runqueue if began <= at <= ended]
            slow.append(
                {
                    "flight_ms": None if took is None else round(took * 1000),
                    "responder_ms": next(
                        (
                            None if r is None else round(r * 1000)
                            for at, r in samples["responder"]
                            if abs(at - began) < 0.05
                        ),
                        None,
                    ),
                    "b_thread_late_ms": max(
                        (round(s[1] * 1000) for s in b_stalls if began <= s[0] <= ended + 0.1),
                        default=0,
                    ),
                    "driver_thread_late_ms": max(
                        (round(s[1] * 1000) for s in local_stalls if began <= s[0] <= ended + 0.1),
                        default=0,
                    ),
                    "b_runqueue_wait_ms": round((waits[-1] - waits[0]) * 1000) if waits else None,
                }
            )
        flight_link.close()
        ping_link.close()
        responder.close()
        control.close()
        return {
            "seconds": seconds,
            "query_started_after_s": round(started[0] - samples["responder"][0][0], 2)
            if started
            else None,
            "by_path": {p: _summary([v for _, v in samples[p]]) for p in PATHS},
            "b_thread_stalls_over_50ms": len(b_stalls),
            "b_thread_max_late_ms": round(max((s[1] for s in b_stalls), default=0) * 1000),
            "driver_thread_stalls_over_50ms": len(local_stalls),
            "driver_thread_max_late_ms": round(max((s[1] for s in local_stalls), default=0) * 1000),
            "b_runqueue_wait_s_total": round(runqueue[-1][1] - runqueue[0][1], 3),
            "slow_flight_answers": slow,
        }
    finally:
        procs.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hb-starvation-") as tmp:
        result = measure(Path(tmp), args.seconds)
    result["load_average_before"] = [round(x, 2) for x in load_before]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
