"""What the Spark DPC tests share: two producers (a, b) and a home log, the stateful ports
fragment reading both, the failure-free reference, and the inputs of a failure of b.

Imported by test_spark_dpc.py, test_spark_dpc_restart.py (whose child process builds the spec
from locations alone) and test_sunion_cut_link.py; the ``dpc_servers`` fixture is in conftest.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spark_jobs.generators import ConnectionGenerator, RateSchedule
from spark_jobs.generators.connections import bucket_of
from spark_jobs.runtime import FragmentRuntime, FragmentSpec, StreamClient, StreamRef, publish
from tests.integration.runtime.conftest import BUCKET, GENERATOR, declare, ports_fragment, rows

SECONDS = 10
OTHER = ConnectionGenerator(seed=12, schedule=RateSchedule.constant(40), scan_rate=4)
X = 3.0
FIRST = bucket_of(round(GENERATOR.epoch.timestamp() * 1_000_000), BUCKET)


def ms(bucket: int) -> int:
    """A bucket's start on the injected clock (stime ms)."""
    return bucket * round(BUCKET * 1000)


def spec(servers: dict[str, Any], suffix: str) -> FragmentSpec:
    """The ports fragment (4 s windows, stateful) on inputs a and b, output to home."""
    base = ports_fragment(
        f"ports{suffix}", servers["a"], f"a{suffix}", servers["home"], f"out{suffix}"
    )
    return dataclasses.replace(
        base,
        inputs=(
            StreamRef(servers["a"].location, f"a{suffix}"),
            StreamRef(servers["b"].location, f"b{suffix}"),
        ),
    )


def reference(servers: dict[str, Any], host: FragmentRuntime) -> list[tuple[Any, ...]]:
    """The failure-free output of SECONDS of both inputs (streams suffixed ``-ref``)."""
    with declare(servers["a"], "a-ref") as a, declare(servers["b"], "b-ref") as b:
        publish(a, "a-ref", GENERATOR.seconds(0, SECONDS), BUCKET)
        publish(b, "b-ref", OTHER.seconds(0, SECONDS), BUCKET)
    declare(servers["home"], "out-ref").close()
    host.start(spec(servers, "-ref"), epoch=0).processAllAvailable()
    host.stop("ports-ref")
    out = rows(servers["home"].log.table("out-ref"))
    assert len({r[0] for r in out}) >= 2, "the reference must close two windows to compare"
    return out


def withheld_inputs(
    servers: dict[str, Any], withheld_from: int
) -> tuple[StreamClient, StreamClient, StreamClient]:
    """Declare the clock, a, b and out; publish all of a and b up to ``withheld_from`` (b's
    rest is the failure). Returns the clients of clock, a and b (close them)."""
    clock = declare(servers["home"], "clock")
    a, b = declare(servers["a"], "a"), declare(servers["b"], "b")
    declare(servers["home"], "out").close()
    publish(a, "a", GENERATOR.seconds(0, SECONDS), BUCKET)
    publish(b, "b", OTHER.seconds(0, withheld_from), BUCKET)
    return clock, a, b
