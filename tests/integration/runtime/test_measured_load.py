"""A fragment's measured load follows what Spark spends on its rows.

The fragment runs live on the shared session, fed in real time by a paced publisher, and its
load is read with the agent's meter (executor CPU of the query's jobs per second), idle, at 500
and at 1,000 rows/s. A micro-batch has a fixed executor cost of its own (task launch, the state
store's load and commit), paid at any rate, so rows show as load above the idle load: 2.0-2.7x
idle in every run so far, where a meter of fixed costs only stays near 1x.

Doubling the rate does not reliably double the rows' share on these two-core machines, so it
is printed, not asserted: 1.78x alone at 1,000 and 2,000 rows/s; 0.77x at those rates late in a
full CI run (idle 2.5, 6.1, 5.3 units) and 0.9x at 500 and 1,000 alone an hour later; 1.34x at
3,000 and 6,000, where SUnion's reads in the Python workers bound the query and their CPU is not
in Spark's task metrics (``spark_jobs.runtime.cpu_load``).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from spark_jobs.generators import ConnectionGenerator, RateSchedule
from spark_jobs.runtime import StreamClient
from spark_jobs.runtime.cpu_load import SparkCpuMeter
from tests.integration.runtime.conftest import declare, ports_fragment

pytestmark = pytest.mark.spark

PHASE_SECONDS = 14
RATE = 500.0


EPOCH_BUCKET = ConnectionGenerator(seed=5).second_start_us(0) // 1_000_000


def _feed(client: StreamClient, stream: str, rate: float, seconds: int, first: int) -> None:
    """The generator's seconds [first, first + seconds) at ``rate`` rows a second (none at 0),
    each bucket closed as its wall-clock second ends."""
    generator = ConnectionGenerator(
        seed=5, schedule=RateSchedule.constant(max(rate, 1.0)), scan_rate=4
    )
    started = time.monotonic()
    for index in range(seconds):
        if rate > 0:
            client.append(stream, generator.second(first + index))
        time.sleep(max(0.0, started + index + 1 - time.monotonic()))
        client.advance(stream, int(EPOCH_BUCKET) + first + index + 1)


def _load_while(meter, host, name: str, feed) -> float:
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    loads = []
    deadline = time.monotonic() + PHASE_SECONDS
    while time.monotonic() < deadline:
        meter.observe(name, [host.run_id(name)])
        time.sleep(1.0)
    feeder.join()
    meter.observe(name, [host.run_id(name)])
    loads.append(meter.load(name))
    assert loads[-1] is not None, "ten seconds of batches must be enough to measure"
    return float(loads[-1])


def test_rows_show_as_load_above_the_querys_idle_load(spark, servers, make_runtime):
    source = declare(servers["source"], "conns")
    declare(servers["home"], "out").close()
    spec = dataclasses.replace(
        ports_fragment("q", servers["source"], "conns", servers["home"], "out"),
        trigger_seconds=0.5,
        max_buckets_per_batch=4,
    )
    host = make_runtime("M")
    source.advance("conns", int(EPOCH_BUCKET))
    host.start(spec, epoch=0)
    meter = SparkCpuMeter(spark, window=10.0)
    try:
        at = 0
        phases = {}
        for label, rate in (
            ("warm-up", RATE),
            ("idle", 0.0),
            ("single", RATE),
            ("double", 2 * RATE),
        ):
            meter.forget("q")
            phases[label] = _load_while(
                meter,
                host,
                "q",
                lambda rate=rate, at=at: _feed(source, "conns", rate, PHASE_SECONDS, at),
            )
            at += PHASE_SECONDS
        idle, single, double = phases["idle"], phases["single"], phases["double"]
        print(
            f"measured load units: {phases}; rows' share 2x/1x: "
            f"{(double - idle) / max(single - idle, 1e-9):.2f}"
        )
        # Rows cost CPU above the query's idle cost at either rate (2.0-2.7x idle in every run
        # so far); a meter of fixed costs only, or of nothing, stays near 1x.
        assert idle > 0, phases
        assert single > 1.3 * idle and double > 1.3 * idle, phases
    finally:
        host.stop("q")
        source.close()
