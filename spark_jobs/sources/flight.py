"""The agent's side of a Flight source (``source: {kind: flight}``).

An application publishes into the log itself (``app.publish.Publisher``, ``fedload publish``):
the agent serves the log, declared at the federation's bucket width, and runs nothing for it,
except with ``idle_advance: true`` (event times that track the wall clock): then it closes the
log's buckets up to (now - ``lateness``) once a bucket, so readers downstream release buckets
while the application has nothing to publish. Rows published later than that are late
(``Publisher`` counts and drops them).
"""

from __future__ import annotations

import threading
import time

from app.publish import boundary_after, lateness_seconds
from app.work.spec import SourceSpec
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.sources import SourceContext, idle_advance


class FlightSource:
    """The runner of a flight source (``spark_jobs.sources.Runner``)."""

    def __init__(self, spec: SourceSpec, context: SourceContext) -> None:
        self.spec, self.context = spec, context
        self.stopped = threading.Event()
        self.idle = idle_advance(spec.options)
        self.lateness_s = lateness_seconds(spec.options)

    def run(self) -> None:
        if not self.idle:
            return  # the publishers close the buckets: nothing to run here
        with StreamClient(self.context.location) as client:
            while not self.stopped.wait(self.context.bucket_seconds):
                boundary = boundary_after(
                    time.time_ns() // 1000, self.lateness_s, self.context.bucket_seconds
                )
                client.advance(
                    self.context.stream, boundary, bucket_seconds=self.context.bucket_seconds
                )

    def stop(self) -> None:
        self.stopped.set()
