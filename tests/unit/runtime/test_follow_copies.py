"""The agent hands a running fragment its inputs' active copies as the registry lists them,
without a restart, and only when the input logs themselves are the running ones
(``SparkParticipantHost._follow_copies``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

from spark_jobs.fragments import CONNECTION_SCHEMA, distinct_port_counts
from spark_jobs.runtime.host import FragmentSpec, StreamRef
from spark_jobs.runtime.participant_host import SparkParticipantHost

OWNER = "grpc://127.0.0.1:9001"
COPY_T = StreamRef("grpc://127.0.0.1:9002", "O.p.out@T")
COPY_U = StreamRef("grpc://127.0.0.1:9003", "O.p.out@U")


@dataclass
class RecordingRuntime:
    """Only what ``_follow_copies`` asks of the runtime: the updates it was given."""

    updates: list[tuple[str, tuple[StreamRef, ...]]] = field(default_factory=list)

    def update_alternates(self, fragment: str, inputs: Sequence[StreamRef]) -> bool:
        self.updates.append((fragment, tuple(inputs)))
        return True


def spec(*inputs: StreamRef) -> FragmentSpec:
    return FragmentSpec(
        name="O.s",
        build=functools.partial(distinct_port_counts, window_seconds=4, threshold=3),
        input_schema=CONNECTION_SCHEMA,
        inputs=inputs,
        output=StreamRef(OWNER, "O.s.out"),
    )


def follow(running: FragmentSpec, wanted: FragmentSpec) -> list[tuple[str, tuple]]:
    runtime = RecordingRuntime()
    host = SimpleNamespace(runtime=runtime)
    SparkParticipantHost._follow_copies(host, running, wanted)  # type: ignore[arg-type]
    return runtime.updates


def test_a_copy_placed_after_the_start_reaches_the_running_fragment() -> None:
    running = spec(StreamRef(OWNER, "O.p.out"))
    wanted = spec(StreamRef(OWNER, "O.p.out", (COPY_T,)))
    assert follow(running, wanted) == [("O.s", wanted.inputs)]


def test_a_moved_or_dropped_copy_reaches_it_too() -> None:
    running = spec(StreamRef(OWNER, "O.p.out", (COPY_T,)))
    moved = spec(StreamRef(OWNER, "O.p.out", (COPY_U,)))
    dropped = spec(StreamRef(OWNER, "O.p.out"))
    assert follow(running, moved) == [("O.s", moved.inputs)]
    assert follow(running, dropped) == [("O.s", dropped.inputs)]


def test_nothing_is_asked_when_nothing_changed_or_an_input_log_did() -> None:
    running = spec(StreamRef(OWNER, "O.p.out", (COPY_T,)))
    assert follow(running, running) == []
    # Another input log is no new alternate: the runtime would refuse it.
    elsewhere = spec(StreamRef("grpc://127.0.0.1:9009", "O.p.out", (COPY_T,)))
    assert follow(running, elsewhere) == []
