"""The Spark round path against the NumPy reference (app/market/rounds.py), round by round."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.market.rounds import generate_large, run_rounds
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
    # Three partitions: each pass's picks per giver must not depend on how edges are split.
    result = spark_rounds(spark, fed, max_rounds=max_rounds, record_loads=True, partitions=3)

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
    np.testing.assert_array_equal(result.thresholds, reference.thresholds)


def test_partitions_of_the_contracts_file_hold_every_directed_edge_once_in_reference_order(
    tmp_path,
):
    from spark_jobs.whatif.large import _GiverSorted, write_contracts

    fed = generate_large(participants=25, contracts_per_participant=5, uneven=True, seed=4)
    loaded = _GiverSorted(str(write_contracts(fed, tmp_path)))
    parts = [loaded.part(i, 4) for i in range(4)]
    giver, taker, pmin, pmax = fed.directed()
    got = [np.concatenate([p[c] for p in parts]) for c in range(4)]
    # Givers in contiguous ranges, one range per partition, and within a giver the order of
    # LargeFederation.directed (ties in the per-giver picks are broken by that order).
    for a, b in itertools.pairwise(parts):
        assert a[0].size and b[0].size and a[0].max() < b[0].min()
    order = np.argsort(giver, kind="stable")
    for column, want in zip(got, (giver, taker, pmin, pmax), strict=True):
        np.testing.assert_array_equal(column, want[order])


def test_whatif_large_reads_parquet_tables_and_ends_where_the_numpy_rounds_end(spark, tmp_path):
    import json

    from typer.testing import CliRunner

    from app.cli import cli
    from app.market.rounds import participant_names
    from spark_jobs.whatif.large_input import LargeInput, write_tables

    # A fixed-price federation where only chains through full relays reach the room.
    fed = generate_large(
        participants=30,
        contracts_per_participant=2,
        price_range_width=0.0,
        load_skew=2.0,
        utilisation=0.8,
        seed=0,
    )
    names = [f"site-{n}" for n in participant_names(fed.size)]
    write_tables(LargeInput(fed, names, "test"), tmp_path / "tables")
    reference = run_rounds(fed)
    assert any(r.relayed for r in reference.rounds), "the case should need relays"

    result = CliRunner().invoke(
        cli, ["whatif", "--large", str(tmp_path / "tables"), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["final_load"] == dict(zip(names, reference.final_load.tolist(), strict=True))
    assert summary["acceptable"] == reference.acceptable is True
    assert summary["rounds"] == len(reference.rounds)
    assert summary["cost_bounded_price_bound"] <= summary["cost"]


def test_whatif_large_refuses_bad_spark_conf_and_bad_tables_by_name(tmp_path):
    from typer.testing import CliRunner

    from app.cli import cli

    bad_conf = ["--spark-conf", "spark.driver.memory"]
    result = CliRunner().invoke(
        cli, ["whatif", "--large", "40", "--k", "4", *bad_conf, "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2  # a user mistake
    assert "--spark-conf 'spark.driver.memory': expected KEY=VALUE" in result.output
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        cli, ["whatif", "--large", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "participants.parquet: (file): cannot read" in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()


def test_a_spark_driver_that_cannot_start_ends_the_command_with_a_clear_error(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    # A fresh process, so the command starts its own JVM (a warm test session would be reused):
    # Spark refuses a driver heap below its minimum, and the command must say so and exit.
    fedload = Path(sys.executable).parent / "fedload"
    tiny = ["--spark-conf", "spark.driver.memory=32m"]
    done = subprocess.run(
        [str(fedload), "whatif", "--large", "40", "--k", "4", "--out", str(tmp_path / "o"), *tiny],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "error:" in done.stderr and "Spark" in done.stderr
    assert "Traceback" not in done.stderr
