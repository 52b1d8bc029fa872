"""``check_allocation``, the former simulator check, now a view of the one acceptability rule."""

from __future__ import annotations

from app.market.allocation import Standing, check_allocation
from app.market.cost_models import MM1Cost

M = MM1Cost(capacity=100)


def _s(name: str, load: float, smallest: float | None = 5.0) -> Standing:
    return Standing(name, M, load, threshold=80.0, price=0.25, smallest_task=smallest)


def test_underloaded_federation_is_acceptable_when_nobody_is_over() -> None:
    v = check_allocation([_s("A", 80), _s("B", 75), _s("C", 25)], delta=0.005)
    assert v.acceptable and not v.overloaded and v.offenders == ()


def test_underloaded_federation_names_the_participant_over_its_threshold() -> None:
    v = check_allocation([_s("A", 85), _s("B", 75), _s("C", 20)], delta=0.005)
    assert not v.acceptable and v.offenders == ("A",)
    # B at 75 cannot take a 5-unit task below the price less the band; C can.
    assert v.reasons == ("A is over its threshold (85.0 > 80.0) while C has room",)


def test_a_load_just_over_the_threshold_within_one_task_counts_as_at_it() -> None:
    # Removing the only 5-unit task from 82 saves 0.24 per unit: below price + band.
    assert check_allocation([_s("A", 82), _s("B", 10)], delta=0.005).acceptable


def test_overloaded_federation_is_acceptable_when_everyone_is_at_or_above() -> None:
    v = check_allocation([_s("A", 80), _s("B", 115), _s("C", 75)], delta=0.005)
    assert v.overloaded and v.acceptable


def test_overloaded_federation_names_the_participant_with_room() -> None:
    v = check_allocation([_s("A", 80), _s("B", 165), _s("C", 25)], delta=0.005)
    assert v.overloaded and not v.acceptable and v.offenders == ("C",)
    assert "while the federation is overloaded" in v.reasons[0]
