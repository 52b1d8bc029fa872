"""A fragment's load measured from what Spark spends on it: executor CPU of its query's jobs.

Borealis measured load as CPU per operator (1 unit = 1% of a reference CPU). Spark runs every
micro-batch of a streaming query as jobs in the job group of the query's run id, and its status
store keeps each finished stage's task metrics whether or not the UI runs: executor CPU time
and the CPU spent deserialising tasks, in nanoseconds. So the load of a fragment is the CPU of
the stages of its run ids' finished jobs, per second of wall time, over a sliding window, times
``units_per_core`` (100: the reference CPU is one core of this host).

What this does not see, by construction of Spark's task metrics: the driver's planning of each
batch, and the Python workers of a Python data source or UDF (their process CPU is outside the
executor's task thread). Those are the fixed cost of a query that every fragment pays alike
(Spark's own floor), not the cost of its rows, which is what a move shifts between hosts.

The window rule is pure (:class:`CpuWindow`); :class:`SparkCpuMeter` reads the status store.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("fedload.agent.load")

# Borealis: 1 load unit = 1% of a reference CPU; here the reference is one core of the host.
UNITS_PER_CORE = 100.0
WINDOW_SECONDS = 10.0
# Fewer seconds than this of samples say too little (a query that just started or moved here
# ran one or two batches, one of them its start-up): the task keeps the load it had.
MIN_SPAN_SECONDS = 3.0
# A query's first seconds here are its start-up and catch-up (see ``observe``).
SETTLE_SECONDS = 8.0
# ... and its first batches: the first catches up on everything that waited meanwhile.
SETTLE_BATCHES = 2
# Spark's status store keeps 1,000 stages by default (spark.ui.retainedStages); remembering
# more ids than that only holds memory.
MAX_REMEMBERED_STAGES = 5000


@dataclass
class CpuWindow:
    """Cumulative CPU seconds sampled over wall time; the rate over the last ``window``."""

    window: float = WINDOW_SECONDS
    min_span: float = MIN_SPAN_SECONDS
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    total: float = 0.0

    def add(self, now: float, cpu_seconds: float) -> None:
        """Record ``cpu_seconds`` more CPU as of ``now`` (0 still marks the time: idle)."""
        if cpu_seconds < 0:
            raise ValueError(f"CPU time cannot go back: {cpu_seconds}")
        self.total += cpu_seconds
        self.samples.append((now, self.total))
        # Keep one sample at or before the window's start, so the rate spans the whole window.
        while len(self.samples) > 2 and self.samples[1][0] <= now - self.window:
            self.samples.popleft()

    def cores(self) -> float | None:
        """CPU seconds per wall second over the window, or None while it spans too little."""
        if len(self.samples) < 2:
            return None
        (first, start), (last, end) = self.samples[0], self.samples[-1]
        span = last - first
        if span < self.min_span:
            return None
        return (end - start) / span


class SparkCpuMeter:
    """Executor CPU per fragment, from the jobs Spark ran in its query's job groups."""

    def __init__(
        self,
        spark: Any,
        *,
        units_per_core: float = UNITS_PER_CORE,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._store = spark.sparkContext._jsc.sc().statusStore()
        self.units_per_core = units_per_core
        self._window = window
        self._clock = clock
        self._windows: dict[str, CpuWindow] = {}
        # Per run id, the jobs already counted: a job is counted once, when it has finished.
        self._counted: dict[str, set[int]] = {}
        # Stages already counted, in the order counted: a stage that two jobs of one batch
        # share (a shuffle reused) ran once, and the second job lists it as skipped.
        self._stages: dict[int, None] = {}

    def observe(self, fragment: str, run_ids: Any, *, settling: bool = False) -> None:
        """Count the CPU of the newly finished jobs of ``run_ids`` (the fragment's queries
        here: a restart or a DPC redo runs under another run id, and all of them are its cost).

        ``settling``: the query has only just started here. Its first batches catch up on what
        accumulated during the move and warm the state store: 3-5x its steady CPU in the
        measured-load test, a cost of the move and not of the fragment, which a load sold on
        it would carry to the next host. Their jobs are counted off and the window starts
        after them."""
        spent = 0.0
        for run_id in run_ids:
            spent += self._new_cpu(str(run_id))
        if settling:
            self._windows.pop(fragment, None)
            return
        window = self._windows.setdefault(fragment, CpuWindow(self._window))
        window.add(self._clock(), spent)

    def load(self, fragment: str) -> float | None:
        """The fragment's load in load units, or None while too little has been seen."""
        window = self._windows.get(fragment)
        cores = None if window is None else window.cores()
        return None if cores is None else cores * self.units_per_core

    def forget(self, fragment: str) -> None:
        """Drop a fragment that no longer runs here (moved away): its next stay starts anew."""
        self._windows.pop(fragment, None)

    def _new_cpu(self, run_id: str) -> float:
        counted = self._counted.setdefault(run_id, set())
        jobs = list(self._tracker.getJobIdsForGroup(run_id))
        nanos = 0
        for job in jobs:
            if job in counted:
                continue
            info = self._tracker.getJobInfo(job)
            if info is None:
                counted.add(job)  # evicted from the status store: nothing left to read
                continue
            if info.status not in ("SUCCEEDED", "FAILED"):
                continue  # still running: counted when it has finished
            nanos += sum(self._stage_cpu(stage) for stage in info.stageIds)
            counted.add(job)
        # The store keeps a bounded number of jobs: ids it no longer lists are never seen again.
        counted.intersection_update(jobs)
        return nanos / 1e9

    def _stage_cpu(self, stage: int) -> int:
        if stage in self._stages:
            return 0
        self._stages[stage] = None
        while len(self._stages) > MAX_REMEMBERED_STAGES:
            del self._stages[next(iter(self._stages))]
        try:
            data = self._store.lastStageAttempt(stage)
        except Exception:  # a stage evicted from the store, or skipped (never ran): no CPU
            return 0
        return int(data.executorCpuTime()) + int(data.executorDeserializeCpuTime())
