"""Large federations read from a planner's input (spark_jobs/whatif/large_input.py).

The round algorithm on a federation read back from Parquet against the per-task simulator
(``app.market.simulator.simulate``) on the same small federations with unit tasks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.federation.document import (
    ContractSpec,
    FederationDoc,
    ParticipantSpec,
    SimulationSpec,
    TaskSpec,
)
from app.market.rounds import run_rounds
from app.market.simulator import simulate
from spark_jobs.whatif.large_input import (
    LargeInputError,
    from_federation,
    read_tables,
    write_tables,
)


def _doc(
    loads: list[int],
    capacities: list[float],
    edges: list[tuple[int, int]],
    price_min: float,
    price_max: float,
) -> FederationDoc:
    names = [f"P{i}" for i in range(len(loads))]
    return FederationDoc(
        name="small",
        description="",
        participants=tuple(
            ParticipantSpec(name=n, capacity=c, cost_model={"kind": "mm1"})
            for n, c in zip(names, capacities, strict=True)
        ),
        contracts=tuple(
            ContractSpec(a=names[a], b=names[b], price_min=price_min, price_max=price_max)
            for a, b in edges
        ),
        tasks=tuple(
            TaskSpec(name=f"{names[i]}.t{j}", owner=names[i], load=1.0)
            for i, count in enumerate(loads)
            for j in range(count)
        ),
        timeline=(),
        simulation=SimulationSpec(duration_seconds=3600.0, hysteresis=0.005),
        source="small.yaml",
    )


def _through_parquet(doc: FederationDoc, directory: Path):
    write_tables(from_federation(doc), directory)
    return read_tables(directory)


@pytest.mark.parametrize(
    ("loads", "capacities", "edges", "price_min", "price_max"),
    [
        ([95, 10], [100.0, 100.0], [(0, 1)], 0.25, 0.25),
        # A chain: P0's load crosses two full relays to P3.
        ([95, 80, 80, 0], [100.0] * 4, [(0, 1), (1, 2), (2, 3)], 0.25, 0.25),
        ([120, 30, 10], [150.0, 100.0, 80.0], [(0, 1), (0, 2)], 0.2, 0.3),
    ],
)
def test_parquet_federation_ends_where_the_per_task_simulator_ends(
    tmp_path, loads, capacities, edges, price_min, price_max
):
    doc = _doc(loads, capacities, edges, price_min, price_max)
    read = _through_parquet(doc, tmp_path)
    np.testing.assert_array_equal(read.fed.load, np.array(loads))
    rounds = run_rounds(read.fed)
    simulated = simulate(doc)
    assert rounds.final_load.tolist() == [simulated.final_load[n] for n in read.names]
    assert rounds.acceptable == simulated.acceptable


def test_random_small_fixed_price_lines_agree_with_the_simulator(tmp_path):
    rng = np.random.default_rng(2026)
    same = 0
    cases = 30
    for case in range(cases):
        n = int(rng.integers(2, 7))
        capacities = [float(rng.integers(60, 150)) for _ in range(n)]
        loads = [int(rng.integers(0, int(c) - 1)) for c in capacities]
        doc = _doc(loads, capacities, [(i, i + 1) for i in range(n - 1)], 0.25, 0.25)
        read = _through_parquet(doc, tmp_path / str(case))
        rounds = run_rounds(read.fed)
        simulated = simulate(doc)
        assert rounds.acceptable == simulated.acceptable, f"case {case}: {loads} {capacities}"
        assert int(rounds.final_load.sum()) == sum(loads)
        same += rounds.final_load.tolist() == [simulated.final_load[n] for n in read.names]
    # Task order inside the simulator's offers can leave a unit elsewhere in a rare case
    # (1 in 103 fixed-price lines when this was written); the verdicts always agree.
    assert same >= cases - 2


def test_bad_rows_are_named_and_nothing_is_read(tmp_path):
    doc = _doc([10, 10], [100.0, 100.0], [(0, 1)], 0.2, 0.3)
    write_tables(from_federation(doc), tmp_path)
    pq.write_table(
        pa.table({"name": ["P0", "P1"], "capacity": [100.0, -5.0]}),
        tmp_path / "participants.parquet",
    )
    with pytest.raises(LargeInputError) as caught:
        read_tables(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'participants.parquet'} row 1: capacity: must be > 0, got -5.0"
    )
    pq.write_table(
        pa.table({"name": ["P0", "P1"], "capacity": [100.0, 100.0]}),
        tmp_path / "participants.parquet",
    )
    pq.write_table(pa.table({"host": ["P0", "P9"], "load": [3.0, 1.0]}), tmp_path / "tasks.parquet")
    with pytest.raises(LargeInputError, match=r"tasks.parquet row 1: host: unknown participant"):
        read_tables(tmp_path)
    pq.write_table(pa.table({"host": ["P0"], "load": [2.5]}), tmp_path / "tasks.parquet")
    with pytest.raises(LargeInputError, match=r"row 0: load: must be a whole number"):
        read_tables(tmp_path)
    with pytest.raises(LargeInputError, match=r"participants.parquet: \(file\): cannot read"):
        read_tables(tmp_path / "missing")


def test_a_federation_file_outside_the_round_model_is_refused_by_field():
    doc = _doc([10, 10], [100.0, 100.0], [(0, 1)], 0.2, 0.3)
    quadratic = ParticipantSpec(name="P1", capacity=100.0, cost_model={"kind": "quadratic"})
    odd = FederationDoc(**{**doc.__dict__, "participants": (doc.participants[0], quadratic)})
    with pytest.raises(LargeInputError) as caught:
        from_federation(odd)
    assert caught.value.field == "cost_model.kind"
    assert "participants[1] (P1)" in str(caught.value)
