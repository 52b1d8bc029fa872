"""The adaptive delay budget of a DPC copy and the deadlines derived from X (no Spark)."""

from __future__ import annotations

import pytest

from spark_jobs.runtime.active import MIN_BUDGET_SHARE, info_timeout_ms
from spark_jobs.runtime.dpc import DPCSettings, budget_for


def test_the_budget_is_x_less_the_median_batch_and_a_trigger_within_its_bounds() -> None:
    settings = DPCSettings(max_delay_seconds=3.0)
    # Nothing measured yet: Borealis's 0.9 X.
    assert budget_for(settings, [], 500) == 2700
    # 3000 - median 400 - trigger 500.
    assert budget_for(settings, [300, 400, 5000], 500) == 2100
    # Fast batches: never above 0.9 X.
    assert budget_for(settings, [10, 20], 100) == 2700
    # Batches that take all of X: nothing left, without a floor.
    assert budget_for(settings, [2800, 2900, 3100], 500) == 0


def test_a_floor_keeps_half_of_x_when_batches_eat_it() -> None:
    settings = DPCSettings(max_delay_seconds=3.0, min_budget_share=MIN_BUDGET_SHARE)
    assert settings.min_budget_ms == 1500
    assert budget_for(settings, [2800, 2900, 3100], 500) == 1500
    # Above the floor the measured budget still applies.
    assert budget_for(settings, [400], 500) == 2100


@pytest.mark.parametrize("share", [-0.1, 0.95])
def test_a_floor_outside_zero_to_the_cap_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="min_budget_share"):
        DPCSettings(max_delay_seconds=3.0, min_budget_share=share)


def test_the_boundary_query_deadline_follows_x_and_reaches_the_source() -> None:
    assert info_timeout_ms(3.0) == 300
    assert info_timeout_ms(20.0) == 2000
    # Never below the source's own default.
    assert info_timeout_ms(1.0) == 250
    options = DPCSettings(max_delay_seconds=3.0, info_timeout_ms=300).source_options(1.0)
    assert options["info_timeout_ms"] == "300"
    assert "info_timeout_ms" not in DPCSettings(max_delay_seconds=3.0).source_options(1.0)
    with pytest.raises(ValueError, match="info_timeout_ms"):
        DPCSettings(max_delay_seconds=3.0, info_timeout_ms=0)
