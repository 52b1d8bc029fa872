"""The DataFrame round path against the NumPy reference (app/market/rounds.py), round by round."""

from __future__ import annotations

import numpy as np
import pytest

from app.market.rounds import generate_large, run_rounds
from spark_jobs.whatif.large import federation_tables
from spark_jobs.whatif.large import run_rounds as spark_rounds

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("participants", "k", "width", "skew", "seed", "max_rounds"),
    [
        (40, 4, 0.1, 1.5, 3, 30),  # converges: acceptable after a few rounds
        (24, 3, 0.05, 2.5, 5, 30),  # odd k: the extra matching contracts
        (30, 2, 0.2, 1.0, 0, 4),  # a ring: load keeps travelling round after round
    ],
)
def test_spark_rounds_match_numpy_rounds(spark, participants, k, width, skew, seed, max_rounds):
    fed = generate_large(
        participants=participants,
        contracts_per_participant=k,
        price_range_width=width,
        load_skew=skew,
        capacity_spread=0.4,
        utilisation=0.8,
        seed=seed,
    )
    reference = run_rounds(fed, max_rounds=max_rounds, record_loads=True)
    assert len(reference.rounds) >= 2, "the federation should need several rounds"
    result = spark_rounds(
        spark, federation_tables(spark, fed), max_rounds=max_rounds, record_loads=True
    )

    assert len(result.loads) == len(reference.loads)
    for r, (got, want) in enumerate(zip(result.loads, reference.loads, strict=True)):
        np.testing.assert_array_equal(got, want, err_msg=f"loads differ after round {r}")
    assert [(r.offers, r.moves, r.units_moved, r.acceptable) for r in result.rounds] == [
        (r.offers, r.moves, r.units_moved, r.acceptable) for r in reference.rounds
    ]
    for got, want in zip(result.rounds, reference.rounds, strict=True):
        assert got.payment_volume == pytest.approx(want.payment_volume, rel=1e-12)
        assert got.cost == pytest.approx(want.cost, rel=1e-12)
    assert result.acceptable == reference.acceptable
    assert result.rounds_to_acceptable == reference.rounds_to_acceptable
    thresholds = result.final_state.select("id", "threshold").toPandas().sort_values("id")
    np.testing.assert_array_equal(thresholds["threshold"].to_numpy(), reference.thresholds)
