"""The demo's real Spark fragments, their traffic, and the reference run they are checked against.

A few of the owner's tasks run as real network-monitoring fragments (second-scale windows so a
short demo produces output). They read one connection stream from a traffic source and write to
an output log kept by the task's owner, so the output stays put while the fragment moves. The
same input is published to a second stream that nobody reads until the end, when one runtime
runs every real fragment over it without moves: the reference.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame

from app.federation.document import FederationDoc
from spark_jobs.fragments import CONNECTION_SCHEMA, connection_counts, distinct_port_counts
from spark_jobs.generators import ConnectionGenerator, RateSchedule
from spark_jobs.runtime import (
    FragmentRuntime,
    FragmentSpec,
    StreamClient,
    StreamRef,
    StreamServer,
    publish,
)

BUCKET_SECONDS = 1.0
NOMINAL_RATE = 60.0  # connection records per simulated second
WINDOW_SECONDS = 10

BUILDERS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "connections_per_source": functools.partial(
        connection_counts, window_seconds=WINDOW_SECONDS, threshold=25
    ),
    "distinct_ports_per_source": functools.partial(
        distinct_port_counts, window_seconds=WINDOW_SECONDS, threshold=10
    ),
}


def choose_real_tasks(doc: FederationDoc, count: int) -> list[str]:
    """The first ``count`` tasks of the most loaded owner whose fragment kind runs on Spark."""
    if count <= 0:
        return []
    by_owner: dict[str, float] = {}
    for task in doc.tasks:
        by_owner[task.owner] = by_owner.get(task.owner, 0.0) + task.load
    busiest = max(by_owner, key=lambda o: by_owner[o])
    runnable = [t.name for t in doc.tasks if t.owner == busiest and t.fragment in BUILDERS]
    return runnable[:count]


@dataclass
class Traffic:
    """The demo's data source: one simulated second of connections per step, in two copies."""

    server: StreamServer
    generator: ConnectionGenerator
    references: tuple[str, ...]
    stream: str = "conns"

    @classmethod
    def start(cls, tasks: list[str], seed: int = 7) -> Traffic:
        """One live stream, plus one untouched copy per real fragment for its reference run
        (a consumer's acknowledgements trim a stream, so references cannot share one)."""
        server = StreamServer()
        references = tuple(reference_stream(t) for t in tasks)
        with StreamClient(server.location) as client:
            for stream in ("conns", *references):
                client.declare(stream, BUCKET_SECONDS)
        generator = ConnectionGenerator(
            seed=seed, schedule=RateSchedule.constant(NOMINAL_RATE), scan_rate=6
        )
        return cls(server, generator, references)

    def emit(self, second: int) -> int:
        table = self.generator.second(second)
        with StreamClient(self.server.location) as client:
            for stream in (self.stream, *self.references):
                publish(client, stream, table, BUCKET_SECONDS)
        return int(table.num_rows)

    def ref(self) -> StreamRef:
        return StreamRef(self.server.location, self.stream)


def reference_stream(task: str) -> str:
    return f"conns-ref-{task}"


def fragment_spec(
    task: str, kind: str, traffic: Traffic, output_host: FragmentRuntime
) -> FragmentSpec:
    with StreamClient(output_host.location) as client:
        client.declare(f"{task}.out", BUCKET_SECONDS)
    return FragmentSpec(
        name=task,
        build=BUILDERS[kind],
        input_schema=CONNECTION_SCHEMA,
        inputs=(traffic.ref(),),
        output=StreamRef(output_host.location, f"{task}.out"),
        bucket_seconds=BUCKET_SECONDS,
        trigger_seconds=0.5,
        max_buckets_per_batch=20,
    )


def rows_of(server: StreamServer, stream: str) -> list[tuple[object, ...]]:
    """A log's rows as sorted tuples: equal lists mean nothing lost and nothing duplicated."""
    return sorted(tuple(r.values()) for r in server.log.table(stream).to_pylist())


def reference_rows(
    spec: FragmentSpec, traffic: Traffic, runtime: FragmentRuntime
) -> list[tuple[object, ...]]:
    """Run ``spec`` alone on ``runtime`` over the untouched copy of the input."""
    with StreamClient(runtime.location) as client:
        client.declare(f"{spec.name}.ref", BUCKET_SECONDS)
    ref = replace(
        spec,
        name=f"{spec.name}-reference",
        inputs=(StreamRef(traffic.server.location, reference_stream(spec.name)),),
        output=StreamRef(runtime.location, f"{spec.name}.ref"),
    )
    runtime.start(ref, epoch=0).processAllAvailable()
    runtime.stop(ref.name)
    return rows_of(runtime.server, f"{spec.name}.ref")


class ProgressRates:
    """Rows per simulated second each real fragment processed, from Spark's query progress."""

    def __init__(self, runtimes: dict[str, FragmentRuntime], window_steps: int = 5) -> None:
        self._runtimes = runtimes
        self._seen: dict[str, set[tuple[str, int]]] = {}
        self._history: dict[str, list[int]] = {}
        self._window = window_steps

    def sample(self, task: str) -> None:
        """Record the rows processed since the last sample (call once per step)."""
        seen = self._seen.setdefault(task, set())
        rows = 0
        for runtime in self._runtimes.values():
            if not runtime.is_running(task):
                continue
            for progress in runtime.query(task).recentProgress:
                key = (str(progress["runId"]), int(progress["batchId"]))
                if key not in seen:
                    seen.add(key)
                    rows += int(progress["numInputRows"])
        history = self._history.setdefault(task, [])
        history.append(rows)
        del history[: -self._window]

    def rate(self, task: str, step_seconds: float) -> float | None:
        history = self._history.get(task)
        if not history or len(history) < 2:
            return None
        return sum(history) / (len(history) * step_seconds)
