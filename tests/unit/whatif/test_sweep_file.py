"""Sweep files: the grid they describe, and errors that name the file, the line and the field."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from spark_jobs.whatif.sweep_file import (
    GridSweep,
    LargeSweep,
    SweepFileError,
    grid_combinations,
    load_sweep,
    parse_sweep,
)

ROOT = Path(__file__).resolve().parents[3]

GOOD = """\
sweep: tiny
grid:
  participants: [6, 8]
  contracts_per_participant: [1, 3]
  price_range_width: [0.0, 0.1, 0.2]
  load_skew: 0.5
seeds: [4, 9]
max_steps: 50
"""


def test_grid_rows_are_every_combination_times_every_seed():
    sweep = parse_sweep(GOOD, source="tiny.yaml")
    assert isinstance(sweep, GridSweep)
    assert sweep.size == 2 * 2 * 3 * 2
    rows = sweep.rows()
    assert [r["id"] for r in rows] == list(range(sweep.size))
    seen = {
        (r["participants"], r["contracts_per_participant"], r["price_range_width"], r["seed"])
        for r in rows
    }
    assert seen == set(itertools.product([6, 8], [1, 3], [0.0, 0.1, 0.2], [4, 9]))
    # Defaults fill the axes the file leaves out; a scalar is a one-value axis.
    assert {r["load_skew"] for r in rows} == {0.5}
    assert {r["overload"] for r in rows} == {0.7}
    assert {r["tasks_per_participant"] for r in rows} == {10}
    assert sweep.max_steps == 50
    assert len(grid_combinations(sweep)) == 12
    with pytest.raises(IndexError):
        sweep.row(sweep.size)


def test_seed_count_means_seeds_from_zero():
    sweep = parse_sweep(GOOD.replace("seeds: [4, 9]", "seeds: 3"))
    assert isinstance(sweep, GridSweep)
    assert sweep.seeds == (0, 1, 2)


def test_shipped_examples_parse():
    grid = load_sweep(ROOT / "contracts/sweeps/k-vs-width.yaml")
    assert isinstance(grid, GridSweep) and grid.size == 200
    large = load_sweep(ROOT / "contracts/sweeps/large.yaml")
    assert isinstance(large, LargeSweep)
    assert (large.participants, large.contracts_per_participant) == (100_000, 10)


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "words"),
    [
        ("[0.0, 0.1, 0.2]", "[0.0, 0.1, 3]", 5, "grid.price_range_width[2]", "[0, 2)"),
        ("[1, 3]", "[1, 8]", 4, "grid.contracts_per_participant[1]", "at least 9 participants"),
        ("[6, 8]", "[6, 1.5]", 3, "grid.participants[1]", "must be an integer"),
        ("load_skew: 0.5", "load_skew: -1", 6, "grid.load_skew", ">= 0"),
        ("load_skew: 0.5", "load_skw: 0.5", 6, "grid.load_skw", "unknown key"),
        ("seeds: [4, 9]", "seeds: [4, 4]", 7, "seeds[1]", "listed twice"),
        ("seeds: [4, 9]", "seeds: 0", 7, "seeds", ">= 1"),
        ("max_steps: 50", "max_steps: yes", 8, "max_steps", "must be a number"),
        ("  participants: [6, 8]\n", "", 2, "grid.participants", "required"),
        ("sweep: tiny", "sweep: ''", 1, "sweep", "non-empty"),
    ],
)
def test_bad_sweep_names_file_line_and_field(old, new, line, field, words):
    text = GOOD.replace(old, new)
    assert text != GOOD
    with pytest.raises(SweepFileError) as caught:
        parse_sweep(text, source="sweeps/bad.yaml")
    error = caught.value
    assert (error.source, error.field) == ("sweeps/bad.yaml", field)
    assert error.line == line
    assert words in error.detail
    assert str(error).startswith(f"sweeps/bad.yaml:{line}: {field}: ")


def test_large_sweep_is_checked_like_a_grid():
    text = "sweep: big\nlarge:\n  participants: 9\n  contracts_per_participant: 3\n"
    with pytest.raises(SweepFileError) as caught:
        parse_sweep(text, source="big.yaml")
    assert caught.value.field == "large.contracts_per_participant"
    assert "even number" in caught.value.detail
    both = "sweep: x\ngrid: {participants: 4, contracts_per_participant: 1, price_range_width: 0}\n"
    with pytest.raises(SweepFileError, match="exactly one of"):
        parse_sweep(both + "large: {participants: 4, contracts_per_participant: 2}\n")


def test_unreadable_file_is_named(tmp_path):
    with pytest.raises(SweepFileError) as caught:
        load_sweep(tmp_path / "missing.yaml")
    assert caught.value.field == "(file)"
    assert "missing.yaml" in str(caught.value)
