"""What a fragment's output must be: the same catalogue fragment run once, here, without moves.

A live fragment's output log (kept by its owner's agent) is compared with a reference run over
the same seeded input. A live run may still be going, so both are cut at a window end the live
output has passed: every window ending there or before is final on both sides (a window is
emitted whole, once the watermark passes its end), and anything lost or written twice before it
shows up as a difference.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from spark_jobs.fragments import catalogue
from spark_jobs.runtime.dataplane import TokenSource
from spark_jobs.runtime.host import FragmentRuntime, FragmentSpec, StreamRef
from spark_jobs.runtime.participant_host import BUCKET_SECONDS, generator_of
from spark_jobs.runtime.transport import StreamClient, StreamServer, publish

Row = tuple[Any, ...]


def rows_of(table: pa.Table) -> list[Row]:
    """A log's rows as sorted tuples: equal lists mean nothing lost and nothing duplicated."""
    return sorted(tuple(r.values()) for r in table.to_pylist())


def live_rows(location: str, stream: str, tokens: TokenSource | None = None) -> list[Row]:
    with StreamClient(location, tokens=tokens) as client:
        return rows_of(client.read_table(stream))


Upstream = tuple[str, Mapping[str, Any]]


def reference_rows(
    spark: SparkSession,
    fragment: str,
    params: Mapping[str, Any],
    generator_params: Mapping[str, Any],
    seconds: int,
    upstream: Upstream | None = None,
) -> list[Row]:
    """``fragment`` run alone over the generator's first ``seconds`` seconds; with ``upstream``
    (a fragment and its parameters), over that fragment's output of them (a chain of two)."""
    server = StreamServer()
    with tempfile.TemporaryDirectory(prefix="fedload-reference-") as work:
        runtime = FragmentRuntime("reference", spark, Path(work), server=server)
        try:
            with StreamClient(server.location) as client:
                for stream in ("input", "middle", "output"):
                    client.declare(stream, BUCKET_SECONDS)
                generator = generator_of(generator_params)
                publish(client, "input", generator.seconds(0, seconds), BUCKET_SECONDS)
            source, kind = "input", catalogue.GENERATOR
            if upstream is not None:
                _run_alone(runtime, server, upstream[0], upstream[1], (source, kind), "middle")
                source, kind = "middle", upstream[0]
            _run_alone(runtime, server, fragment, params, (source, kind), "output")
            return rows_of(server.log.table("output"))
        finally:
            runtime.close()


def _run_alone(
    runtime: FragmentRuntime,
    server: StreamServer,
    fragment: str,
    params: Mapping[str, Any],
    source: tuple[str, str],
    output: str,
) -> None:
    """Run ``fragment`` over ``source`` (stream, the kind of fragment that wrote it) until it
    has read everything, then stop it once its output's BOUNDARY stands still: a fragment read
    next releases only buckets below that boundary, which the runtime sends after each batch
    from Spark's listener thread, a little after processAllAvailable returns."""
    spec = FragmentSpec(
        name=f"reference-{output}",
        build=catalogue.build(fragment, params),
        input_schema=catalogue.input_schema(source[1]),
        inputs=(StreamRef(server.location, source[0]),),
        output=StreamRef(server.location, output),
        bucket_seconds=BUCKET_SECONDS,
        trigger_seconds=0.1,
        max_buckets_per_batch=1000,
    )
    runtime.start(spec, epoch=0).processAllAvailable()
    last: Any = None
    for _ in range(50):
        boundary = server.log.info(output)["boundary"]
        if boundary is not None and boundary == last:
            break
        last = boundary
        time.sleep(0.2)
    runtime.stop(spec.name)


@dataclass(frozen=True)
class Comparison:
    matches: bool
    cutoff: Any
    rows: int
    expected_rows: int
    missing: int
    unexpected: int
    missing_examples: list[list[str]]
    unexpected_examples: list[list[str]]
    # The first column (the window end) of every missing row, once each: where a loss lies.
    missing_window_ends: list[Any] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "cutoff": str(self.cutoff),
            "missing_window_ends": [str(end) for end in self.missing_window_ends],
        }


def compare(live: list[Row], reference: list[Row], cutoff: Any) -> Comparison:
    """Rows whose first column (``stime``, the window end) is at or before ``cutoff``."""
    got = [r for r in live if r[0] <= cutoff]
    expected = [r for r in reference if r[0] <= cutoff]
    missing = Counter(expected) - Counter(got)
    unexpected = Counter(got) - Counter(expected)
    return Comparison(
        matches=bool(expected) and not missing and not unexpected,
        cutoff=cutoff,
        rows=len(got),
        expected_rows=len(expected),
        missing=sum(missing.values()),
        unexpected=sum(unexpected.values()),
        missing_examples=[list(map(str, r)) for r in sorted(missing)[:5]],
        unexpected_examples=[list(map(str, r)) for r in sorted(unexpected)[:5]],
        missing_window_ends=sorted({r[0] for r in missing}),
    )


def check_fragment(
    spark: SparkSession,
    location: str,
    task: Mapping[str, Any],
    generator_params: Mapping[str, Any],
    tokens: TokenSource | None = None,
) -> Comparison:
    """Compare task's live output (at its owner's ``location``, read with ``tokens``: an agent's
    endpoint refuses calls without one) with a reference run, up to the last window end the
    live output has passed (the newest window end may still be filling)."""
    live = live_rows(location, f"{task['name']}.out", tokens)
    return check_rows(spark, live, task, generator_params)


def check_rows(
    spark: SparkSession,
    live: list[Row],
    task: Mapping[str, Any],
    generator_params: Mapping[str, Any],
    *,
    references: dict[str, Any] | None = None,
    upstream: Upstream | None = None,
) -> Comparison:
    """``check_fragment`` on output rows read before (the agents may be stopped meanwhile, so
    the reference runs do not compete with them for the machine). ``references``: a cache the
    caller keeps across calls, so that tasks running the same fragment over the same input
    share one reference run (each costs a Spark query over the whole input). ``upstream``: the
    task reads that fragment's output of the generator, not the generator's (a chain)."""
    params = task.get("params") or {}
    defaults = catalogue.PARAMETERS[task["fragment"]]
    window = int(params.get("window_seconds", defaults.get("window_seconds", 10)))
    if not live:
        return Comparison(False, None, 0, 0, 0, 0, [], [])
    ends = sorted({r[0] for r in live})
    cutoff = ends[-2] if len(ends) > 1 else ends[-1]
    epoch = generator_of(generator_params).epoch
    aware = cutoff if cutoff.tzinfo is not None else cutoff.replace(tzinfo=UTC)
    seconds = int((aware - epoch).total_seconds()) + 2 * window + 2
    if upstream is not None:
        # The upstream's last windows wait in its state for the watermark to pass them.
        above = catalogue.PARAMETERS[upstream[0]]
        seconds += 2 * int(upstream[1].get("window_seconds", above.get("window_seconds", 10))) + 2
    if references is None:
        reference = reference_rows(
            spark, task["fragment"], params, generator_params, seconds, upstream
        )
        return compare(live, reference, cutoff)
    key = json.dumps(
        [task["fragment"], params, generator_params, upstream], sort_keys=True, default=str
    )
    cached = references.get(key)
    if cached is None or cached[0] < seconds:
        # A few windows more than asked: the next task's output usually ends a little later.
        longer = seconds + 4 * window
        cached = (
            longer,
            reference_rows(spark, task["fragment"], params, generator_params, longer, upstream),
        )
        references[key] = cached
    return compare(live, cached[1], cutoff)
