"""When a DPC copy drops its redo because an input is cut again
(``spark_jobs.runtime.dpc.CutWatch``): only once the heal check has failed for X without a
break, so a slow boundary query or an input late by less than X keeps the redo going."""

from __future__ import annotations

from spark_jobs.runtime.dpc import CutWatch

X_S = 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_cut_drops_the_redo_only_after_x_without_a_heal() -> None:
    clock = Clock()
    watch = CutWatch(X_S, clock)
    assert not watch.cut_again(healed=True)
    assert not watch.cut_again(healed=False), "the first failed check starts the count"
    clock.now += X_S - 0.01
    assert not watch.cut_again(healed=False)
    clock.now += 0.01
    assert watch.cut_again(healed=False)


def test_a_heal_check_that_passes_in_between_starts_the_count_again() -> None:
    clock = Clock()
    watch = CutWatch(X_S, clock)
    assert not watch.cut_again(healed=False)
    clock.now += 2.0
    assert not watch.cut_again(healed=True), "late by 2 s, then there: no new failure"
    assert not watch.cut_again(healed=False)
    clock.now += 2.0
    assert not watch.cut_again(healed=False), "2 s since the count began again, not 4"
    clock.now += 1.0
    assert watch.cut_again(healed=False)


def test_reset_forgets_a_count_begun_for_an_earlier_redo() -> None:
    clock = Clock()
    watch = CutWatch(X_S, clock)
    watch.cut_again(healed=False)
    clock.now += 10.0
    watch.reset()
    assert not watch.cut_again(healed=False)
