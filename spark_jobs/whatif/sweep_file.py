"""Sweep files: parameter grids of generated federations, or one very large federation.

Format (YAML; ``contracts/sweeps/README.md`` documents it with examples)::

    sweep: k-vs-width                  # required: a name for the run
    description: "..."                 # optional
    grid:                              # every combination of these values ...
      participants: [12]               #   int >= 2
      contracts_per_participant: [1, 2, 4]   # int >= 1, below every participants value
      price_range_width: [0.0, 0.1]    #   fraction of the price, in [0, 2)
      load_skew: [1.0]                 #   optional, >= 0 (default 1.0)
      capacity_spread: [0.5]           #   optional, >= 0 (default 0.5)
      tasks_per_participant: [10]      #   optional, int >= 1 (default 10)
      overload: [0.7]                  #   optional, > 0; below 1 = underloaded (default 0.7)
    seeds: 10                          # ... times each seed: a count (0..n-1) or a list of ints
    max_steps: 900                     # optional: simulated steps per run (default: the file's)

or, for one very large federation simulated in rounds on Spark DataFrames::

    sweep: planet
    large:
      participants: 100000
      contracts_per_participant: 10
      price_range_width: 0.1           # optional, default 0.1
      load_skew: 1.0                   # optional, default 1.0
      capacity_spread: 0.3             # optional, default 0.3, in [0, 1)
      utilisation: 0.7                 # optional, default 0.7: load / sum of thresholds
      seed: 0                          # optional
      max_rounds: 200                  # optional

A grid value may be a single number instead of a list. Every error names the file, the line and
the field, e.g. ``sweeps/x.yaml:7: grid.price_range_width[2]: must be in [0, 2), got 3``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MAX_SIMULATIONS = 1_000_000

# name -> (kind, default values or None when required, check, what the check means)
_GRID: dict[str, tuple[type, list[Any] | None, Any, str]] = {
    "participants": (int, None, lambda v: v >= 2, "must be an integer >= 2"),
    "contracts_per_participant": (int, None, lambda v: v >= 1, "must be an integer >= 1"),
    "price_range_width": (float, None, lambda v: 0 <= v < 2, "must be in [0, 2)"),
    "load_skew": (float, [1.0], lambda v: v >= 0, "must be >= 0"),
    "capacity_spread": (float, [0.5], lambda v: v >= 0, "must be >= 0"),
    "tasks_per_participant": (int, [10], lambda v: v >= 1, "must be an integer >= 1"),
    "overload": (float, [0.7], lambda v: v > 0, "must be > 0"),
}
_LARGE: dict[str, tuple[type, Any, Any, str]] = {
    "participants": (int, None, lambda v: v >= 2, "must be an integer >= 2"),
    "contracts_per_participant": (int, None, lambda v: v >= 1, "must be an integer >= 1"),
    "price_range_width": (float, 0.1, lambda v: 0 <= v < 2, "must be in [0, 2)"),
    "load_skew": (float, 1.0, lambda v: v >= 0, "must be >= 0"),
    "capacity_spread": (float, 0.3, lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "utilisation": (float, 0.7, lambda v: v > 0, "must be > 0"),
    "seed": (int, 0, lambda v: v >= 0, "must be an integer >= 0"),
    "max_rounds": (int, 200, lambda v: v >= 1, "must be an integer >= 1"),
}
_TOP = {"sweep", "description", "grid", "seeds", "max_steps", "large"}


class SweepFileError(ValueError):
    """``str()`` reads ``file:line: field: what is wrong``, like federation file errors."""

    def __init__(self, source: str, line: int | None, field: str, detail: str) -> None:
        self.source, self.line, self.field, self.detail = source, line, field, detail
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {field}: {detail}")


@dataclass(frozen=True)
class GridSweep:
    name: str
    description: str
    axes: tuple[tuple[str, tuple[float | int, ...]], ...]  # grid name -> values, in _GRID order
    seeds: tuple[int, ...]
    max_steps: int | None
    source: str = "<memory>"

    @property
    def size(self) -> int:
        return math.prod(len(values) for _, values in self.axes) * len(self.seeds)

    def row(self, index: int) -> dict[str, Any]:
        """The parameters of simulation ``index`` (0 <= index < size), without materialising
        the grid, so Spark tasks can decode their own rows from a range of ids."""
        if not 0 <= index < self.size:
            raise IndexError(index)
        out: dict[str, Any] = {"id": index}
        index, seed_pos = divmod(index, len(self.seeds))
        for name, values in reversed(self.axes):
            index, pos = divmod(index, len(values))
            out[name] = values[pos]
        out["seed"] = self.seeds[seed_pos]
        return out

    def rows(self) -> list[dict[str, Any]]:
        return [self.row(i) for i in range(self.size)]


@dataclass(frozen=True)
class LargeSweep:
    name: str
    description: str
    participants: int
    contracts_per_participant: int
    price_range_width: float = 0.1
    load_skew: float = 1.0
    capacity_spread: float = 0.3
    utilisation: float = 0.7
    seed: int = 0
    max_rounds: int = 200
    source: str = "<memory>"


Sweep = GridSweep | LargeSweep


def is_sweep_document(data: object) -> bool:
    return isinstance(data, dict) and "sweep" in data


def _lines(
    node: yaml.Node, path: tuple[str | int, ...], out: dict[tuple[str | int, ...], int]
) -> None:
    out.setdefault(path, node.start_mark.line + 1)  # a key's own line, not its value's
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out[(*path, key.value)] = key.start_mark.line + 1
            _lines(value, (*path, key.value), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _lines(item, (*path, i), out)


class _Where:
    def __init__(self, source: str, lines: dict[tuple[str | int, ...], int]) -> None:
        self.source, self.lines = source, lines

    def error(self, path: Sequence[str | int], detail: str) -> SweepFileError:
        probe = tuple(path)
        while probe and probe not in self.lines:
            probe = probe[:-1]
        name = ""
        for part in path:
            name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else part)
        return SweepFileError(self.source, self.lines.get(probe), name or "(document)", detail)


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SweepFileError(str(path), None, "(file)", f"cannot read: {exc.strerror}") from exc
    return parse_sweep(text, source=str(path))


def parse_sweep(text: str, *, source: str = "<memory>") -> Sweep:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SweepFileError(
            source, mark.line + 1 if mark else None, "(syntax)", f"invalid YAML: {exc}"
        ) from exc
    lines: dict[tuple[str | int, ...], int] = {}
    if node is not None:
        _lines(node, (), lines)
    return sweep_from_data(data, _Where(source, lines), source)


def _number(value: object, kind: type, path: list[str | int], where: _Where) -> float | int:
    # YAML's booleans are ints to Python; a sweep value of `yes` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.error(path, f"must be a number, got {value!r}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise where.error(path, f"must be an integer, got {value!r}")
        return int(value)
    if not math.isfinite(float(value)):
        raise where.error(path, f"must be finite, got {value!r}")
    return float(value)


def _mapping(value: object, path: list[str | int], where: _Where) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise where.error(path, "must be a mapping")
    return value


def _unknown(
    data: Mapping[str, Any], known: set[str], path: list[str | int], where: _Where
) -> None:
    for key in data:
        if key not in known:
            raise where.error(
                [*path, str(key)], f"unknown key; expected one of {', '.join(sorted(known))}"
            )


def sweep_from_data(data: object, where: _Where, source: str) -> Sweep:
    top = _mapping(data, [], where)
    _unknown(top, _TOP, [], where)
    name = top.get("sweep")
    if not isinstance(name, str) or not name.strip():
        raise where.error(["sweep"], "must be a non-empty name")
    description = top.get("description", "")
    if not isinstance(description, str):
        raise where.error(["description"], "must be text")
    if ("grid" in top) == ("large" in top):
        raise where.error([], "needs exactly one of 'grid' (a sweep) or 'large' (one federation)")
    if "large" in top:
        for key in ("seeds", "max_steps"):
            if key in top:
                raise where.error([key], "applies to a grid sweep; use large.seed / max_rounds")
        return _large(top["large"], name, description, where, source)

    grid = _mapping(top["grid"], ["grid"], where)
    _unknown(grid, set(_GRID), ["grid"], where)
    axes: list[tuple[str, tuple[float | int, ...]]] = []
    for key, (kind, default, check, meaning) in _GRID.items():
        if key not in grid:
            if default is None:
                raise where.error(["grid", key], "is required")
            axes.append((key, tuple(default)))
            continue
        raw = grid[key]
        listed = isinstance(raw, list)
        items = raw if listed else [raw]
        if not items:
            raise where.error(["grid", key], "needs at least one value")
        values: list[float | int] = []
        for i, item in enumerate(items):
            path: list[str | int] = ["grid", key, i] if listed else ["grid", key]
            value = _number(item, kind, path, where)
            if not check(value):
                raise where.error(path, f"{meaning}, got {item!r}")
            values.append(value)
        axes.append((key, tuple(values)))
    by_name = dict(axes)
    smallest = min(by_name["participants"])
    for i, k in enumerate(by_name["contracts_per_participant"]):
        if k > smallest - 1:
            listed = isinstance(grid["contracts_per_participant"], list)
            raise where.error(
                ["grid", "contracts_per_participant", *([i] if listed else [])],
                f"{k} contracts per participant need at least {k + 1} participants; "
                f"grid.participants has {smallest}",
            )
    seeds = _seeds(top.get("seeds", 1), where)
    max_steps: int | None = None
    if top.get("max_steps") is not None:
        max_steps = int(_number(top["max_steps"], int, ["max_steps"], where))
        if max_steps < 1:
            raise where.error(["max_steps"], f"must be an integer >= 1, got {max_steps}")
    sweep = GridSweep(name, description, tuple(axes), seeds, max_steps, source)
    if sweep.size > MAX_SIMULATIONS:
        raise where.error(
            ["grid"], f"{sweep.size} simulations; at most {MAX_SIMULATIONS} per sweep file"
        )
    return sweep


def _seeds(raw: object, where: _Where) -> tuple[int, ...]:
    if isinstance(raw, list):
        if not raw:
            raise where.error(["seeds"], "needs at least one seed")
        seeds = [int(_number(s, int, ["seeds", i], where)) for i, s in enumerate(raw)]
        for i, seed in enumerate(seeds):
            if seed < 0:
                raise where.error(["seeds", i], f"must be >= 0, got {seed}")
            if seed in seeds[:i]:
                raise where.error(["seeds", i], f"seed {seed} is listed twice")
        return tuple(seeds)
    count = int(_number(raw, int, ["seeds"], where))
    if count < 1:
        raise where.error(["seeds"], f"a count of seeds must be >= 1, got {count}")
    return tuple(range(count))


def _large(raw: object, name: str, description: str, where: _Where, source: str) -> LargeSweep:
    spec = _mapping(raw, ["large"], where)
    _unknown(spec, set(_LARGE), ["large"], where)
    values: dict[str, Any] = {}
    for key, (kind, default, check, meaning) in _LARGE.items():
        if key not in spec:
            if default is None:
                raise where.error(["large", key], "is required")
            values[key] = default
            continue
        value = _number(spec[key], kind, ["large", key], where)
        if not check(value):
            raise where.error(["large", key], f"{meaning}, got {spec[key]!r}")
        values[key] = value
    n, k = values["participants"], values["contracts_per_participant"]
    if k > n - 1:
        raise where.error(
            ["large", "contracts_per_participant"],
            f"{k} contracts need at least {k + 1} participants",
        )
    if k % 2 == 1 and n % 2 == 1:
        raise where.error(
            ["large", "contracts_per_participant"],
            f"an odd k ({k}) needs an even number of participants, got {n}",
        )
    return LargeSweep(name=name, description=description, source=source, **values)


def grid_combinations(sweep: GridSweep) -> list[dict[str, Any]]:
    """The parameter combinations without seeds (one per group in the report)."""
    names = [name for name, _ in sweep.axes]
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(values for _, values in sweep.axes))
    ]
