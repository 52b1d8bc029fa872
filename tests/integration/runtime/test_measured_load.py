"""A fragment's measured load follows what Spark spends on its rows.

The fragment runs live on the shared session, fed in real time by a paced publisher, and its
load is read with the agent's meter (executor CPU of the query's jobs per second). Doubling the
input rate must about double the load that the rows cost. A micro-batch has a fixed executor
cost of its own (task launch, the state store's load and commit), paid at any rate, so the
check is on the load above the same query's idle load, measured in the same run: the rows'
part must grow 1.65-2.7x (1.78x in the run that set the band, on a two-core machine with a
second Spark beside it). A meter of fixed costs, or one that saturates, lands below it.

The rate is 1,000 rows/s, where the query keeps up. At 3,000 and 6,000 rows/s it did not here,
and the rows' part grew 1.34x: the fragment was then bound by SUnion's reads in the Python
workers, whose CPU Spark's task metrics do not hold (``spark_jobs.runtime.cpu_load``).
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
RATE = 1000.0


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


def test_doubling_the_input_rate_doubles_the_load_of_the_rows(spark, servers, make_runtime):
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
        print(f"measured load units: {phases}")
        assert single > idle > 0, phases
        ratio = (double - idle) / (single - idle)
        assert 1.65 <= ratio <= 2.7, f"the rows' load went {ratio:.2f}x for 2x the rows: {phases}"
    finally:
        host.stop("q")
        source.close()
