"""Where a task's load comes from in the demo.

Every task has a declared load that the federation's timeline scales (B's input rate quadruples,
say). Tasks that run as real Spark fragments are measured instead: Spark's query progress gives
the input rate, and Borealis's load unit converts it (load = input tuples/s x per-tuple cost,
1 unit = 1% of a reference CPU), with the per-tuple cost calibrated so that the nominal rate
gives the declared load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from app.federation.document import FederationDoc


class DeclaredLoads:
    def __init__(self, doc: FederationDoc, now: Callable[[], float]) -> None:
        self._doc = doc
        self._now = now
        self._base = {t.name: t.load for t in doc.tasks}
        self._owner = {t.name: t.owner for t in doc.tasks}

    def load(self, task: str) -> float:
        t = self._now()
        load = self._base[task]
        for event in self._doc.timeline:
            if event.at > t:
                break
            if event.event == "scale_load" and event.participant == self._owner[task]:
                load *= event.factor or 1.0
            elif event.event == "task_load" and event.task == task and event.load is not None:
                load = event.load
        return load


class MeasuredLoads:
    """Load of real fragments from Spark's progress, smoothed; declared load until measured."""

    def __init__(
        self,
        declared: DeclaredLoads,
        rates: Callable[[str], float | None],
        nominal_rate: Mapping[str, float],
        smoothing: float = 0.5,
    ) -> None:
        self._declared = declared
        self._rates = rates
        self._nominal = dict(nominal_rate)
        self._smoothing = smoothing
        self._last: dict[str, float] = {}

    def load(self, task: str) -> float:
        declared = self._declared.load(task)
        if task not in self._nominal:
            return declared
        rate = self._rates(task)
        if rate is None:
            return self._last.get(task, declared)
        cost_per_tuple = declared / self._nominal[task]
        measured = rate * cost_per_tuple
        previous = self._last.get(task, measured)
        self._last[task] = previous + self._smoothing * (measured - previous)
        return self._last[task]


class Meter:
    """The ``LoadMeter`` an agent uses: one shared source of task loads."""

    def __init__(self, source: DeclaredLoads | MeasuredLoads) -> None:
        self._source = source

    def loads(self, tasks: list[str]) -> dict[str, float]:
        return {task: self._source.load(task) for task in tasks}
