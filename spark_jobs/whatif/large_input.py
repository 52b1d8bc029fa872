"""Large federations from a planner's own input: a federation file or three Parquet tables.

The round algorithm (``app.market.rounds``) moves whole load units between M/M/1 participants,
so a federation qualifies when every participant's cost model is ``mm1`` (capacity and
optional ``scale``: D(L) = scale L / (capacity - L), the per-task simulator's ``MM1Cost``),
every task's load is a whole number of units, and nothing changes over time (no timeline, no
participant joining later). Anything else is refused with the file, the row and the field.

Parquet schema (a directory with three files; column order does not matter):

| file | column | type | meaning |
| --- | --- | --- | --- |
| participants.parquet | name | string | unique participant name |
| | capacity | double | > 0, load units |
| | scale | double, optional | > 0, default 1 (M/M/1 cost scale) |
| contracts.parquet | a, b | string | the two parties (names in participants, a != b) |
| | price_min, price_max | double | 0 <= price_min <= price_max, per unit load per second |
| tasks.parquet | host | string | where the task runs at the start |
| | load | double or integer | a whole number of load units, >= 0 |
| | name | string, optional | for error messages only |

``hysteresis`` (the band delta) is a Parquet key-value metadata entry of contracts.parquet
(default 0.005) or the federation file's ``simulation.hysteresis``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.federation.document import FederationDoc, FederationFileError, load_federation
from app.market.rounds import LargeFederation
from spark_jobs.whatif.sweep_file import LargeSweep

DEFAULT_HYSTERESIS = 0.005
TABLES = ("participants", "contracts", "tasks")


class LargeInputError(ValueError):
    """Input the round algorithm cannot take; names the source, the row and the field."""

    def __init__(self, source: str, field: str, detail: str) -> None:
        super().__init__(f"{source}: {field}: {detail}")
        self.source, self.field, self.detail = source, field, detail


@dataclass(frozen=True)
class LargeInput:
    fed: LargeFederation
    names: list[str]
    source: str


@dataclass(frozen=True)
class _Rows:
    names: list[str]
    capacity: list[float]
    scale: list[float]
    contracts: list[tuple[str, str, float, float]]
    tasks: list[tuple[str, str, float]]  # (name, host, load)
    hysteresis: float


def _build(rows: _Rows, source: str, files: dict[str, str]) -> LargeInput:
    index: dict[str, int] = {}
    for row, name in enumerate(rows.names):
        where = f"{files['participants']} row {row}"
        if name in index:
            raise LargeInputError(where, "name", f"duplicate participant {name!r}")
        index[name] = row
        if not (math.isfinite(rows.capacity[row]) and rows.capacity[row] > 0):
            raise LargeInputError(where, "capacity", f"must be > 0, got {rows.capacity[row]}")
        if not (math.isfinite(rows.scale[row]) and rows.scale[row] > 0):
            raise LargeInputError(where, "scale", f"must be > 0, got {rows.scale[row]}")
    if len(index) < 2:
        raise LargeInputError(files["participants"], "name", "needs at least 2 participants")
    edge_a, edge_b, pmin, pmax = [], [], [], []
    for row, (a, b, low, high) in enumerate(rows.contracts):
        where = f"{files['contracts']} row {row}"
        for field, party in (("a", a), ("b", b)):
            if party not in index:
                raise LargeInputError(where, field, f"unknown participant {party!r}")
        if a == b:
            raise LargeInputError(where, "b", f"a contract needs two parties, got {a!r} twice")
        if not (0 <= low <= high and math.isfinite(high)):
            raise LargeInputError(
                where, "price_min", f"need 0 <= price_min <= price_max, got [{low}, {high}]"
            )
        edge_a.append(min(index[a], index[b]))
        edge_b.append(max(index[a], index[b]))
        pmin.append(low)
        pmax.append(high)
    load = np.zeros(len(index), np.int64)
    for row, (task, host, size) in enumerate(rows.tasks):
        where = f"{files['tasks']} row {row}" + (f" ({task})" if task else "")
        if host not in index:
            raise LargeInputError(where, "host", f"unknown participant {host!r}")
        if not (math.isfinite(size) and size >= 0 and float(size).is_integer()):
            raise LargeInputError(
                where, "load", f"must be a whole number of load units >= 0, got {size}"
            )
        load[index[host]] += int(size)
    capacity = np.array(rows.capacity, np.float64)
    over = np.flatnonzero(load >= capacity)
    if over.size:
        i = int(over[0])
        raise LargeInputError(
            files["tasks"],
            "load",
            f"{rows.names[i]} hosts {load[i]} units at or past its capacity {capacity[i]} "
            "(infinite M/M/1 cost): the round model needs every start below capacity",
        )
    if not (math.isfinite(rows.hysteresis) and rows.hysteresis >= 0):
        raise LargeInputError(source, "hysteresis", f"must be >= 0, got {rows.hysteresis}")
    fed = LargeFederation(
        capacity=capacity,
        scale=np.array(rows.scale, np.float64),
        load=load,
        edge_a=np.array(edge_a, np.int64),
        edge_b=np.array(edge_b, np.int64),
        price_min=np.array(pmin, np.float64),
        price_max=np.array(pmax, np.float64),
        hysteresis=rows.hysteresis,
    )
    return LargeInput(fed, list(rows.names), source)


def from_federation(doc: FederationDoc) -> LargeInput:
    """A federation file (already loaded and checked) as a large federation."""
    source = doc.source
    if doc.timeline:
        raise LargeInputError(source, "timeline", "the round model is static: remove the timeline")
    names, capacity, scale = [], [], []
    for row, p in enumerate(doc.participants):
        where = f"{source}: participants[{row}] ({p.name})"
        kind = dict(p.cost_model or {"kind": "mm1"}).get("kind", "mm1")
        if kind != "mm1":
            raise LargeInputError(
                where, "cost_model.kind", f"the round model takes mm1 only, got {kind!r}"
            )
        if p.joins_at is not None:
            raise LargeInputError(where, "joins_at", "the round model is static")
        names.append(p.name)
        capacity.append(float(p.capacity))
        scale.append(float(dict(p.cost_model or {}).get("scale", 1.0)))
    rows = _Rows(
        names=names,
        capacity=capacity,
        scale=scale,
        contracts=[(c.a, c.b, float(c.price_min), float(c.price_max)) for c in doc.contracts],
        tasks=[(t.name, t.host or t.owner, float(t.load)) for t in doc.tasks],
        hysteresis=float(doc.simulation.hysteresis),
    )
    files = {t: f"{source}: {t}" for t in TABLES}
    return _build(rows, source, files)


def _column(table: pa.Table, name: str, file: str, default: object = None) -> list[object]:
    if name not in table.column_names:
        if default is not None:
            return [default] * table.num_rows
        raise LargeInputError(file, name, f"missing column (has {', '.join(table.column_names)})")
    values = table.column(name).to_pylist()
    for row, value in enumerate(values):
        if value is None:
            raise LargeInputError(f"{file} row {row}", name, "null")
    return values


def read_tables(directory: Path) -> LargeInput:
    """The three Parquet tables of ``directory`` (schema in this module's docstring)."""
    files = {t: str(directory / f"{t}.parquet") for t in TABLES}
    tables: dict[str, pa.Table] = {}
    for name, path in files.items():
        try:
            tables[name] = pq.read_table(path)
        except (OSError, pa.ArrowInvalid) as exc:
            raise LargeInputError(path, "(file)", f"cannot read: {exc}") from exc
    p, c, t = tables["participants"], tables["contracts"], tables["tasks"]
    meta = c.schema.metadata or {}
    raw = meta.get(b"hysteresis")
    try:
        hysteresis = float(raw.decode()) if raw is not None else DEFAULT_HYSTERESIS
    except ValueError as exc:
        raise LargeInputError(files["contracts"], "hysteresis", f"not a number: {raw!r}") from exc
    try:
        rows = _Rows(
            names=[str(v) for v in _column(p, "name", files["participants"])],
            capacity=[float(v) for v in _column(p, "capacity", files["participants"])],  # type: ignore[arg-type]
            scale=[float(v) for v in _column(p, "scale", files["participants"], 1.0)],  # type: ignore[arg-type]
            contracts=list(
                zip(
                    [str(v) for v in _column(c, "a", files["contracts"])],
                    [str(v) for v in _column(c, "b", files["contracts"])],
                    [float(v) for v in _column(c, "price_min", files["contracts"])],  # type: ignore[arg-type]
                    [float(v) for v in _column(c, "price_max", files["contracts"])],  # type: ignore[arg-type]
                    strict=True,
                )
            ),
            tasks=list(
                zip(
                    [str(v) for v in _column(t, "name", files["tasks"], "")],
                    [str(v) for v in _column(t, "host", files["tasks"])],
                    [float(v) for v in _column(t, "load", files["tasks"])],  # type: ignore[arg-type]
                    strict=True,
                )
            ),
            hysteresis=hysteresis,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, LargeInputError):
            raise
        raise LargeInputError(str(directory), "(column types)", str(exc)) from exc
    return _build(rows, str(directory), files)


def write_tables(inp: LargeInput, directory: Path) -> None:
    """The inverse of ``read_tables``: one task per participant carrying its whole load."""
    fed = inp.fed
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"name": inp.names, "capacity": fed.capacity, "scale": fed.scale}),
        directory / "participants.parquet",
    )
    contracts = pa.table(
        {
            "a": [inp.names[i] for i in fed.edge_a.tolist()],
            "b": [inp.names[i] for i in fed.edge_b.tolist()],
            "price_min": fed.price_min,
            "price_max": fed.price_max,
        }
    ).replace_schema_metadata({"hysteresis": repr(fed.hysteresis)})
    pq.write_table(contracts, directory / "contracts.parquet")
    pq.write_table(
        pa.table(
            {
                "name": [f"{n}.load" for n in inp.names],
                "host": inp.names,
                "load": fed.load.astype(np.int64),
            }
        ),
        directory / "tasks.parquet",
    )


def load_large_input(path: Path, *, max_rounds: int = 200) -> tuple[LargeSweep, LargeInput]:
    """``fedload whatif --large PATH``: a directory of Parquet tables or a federation file, with
    the run's description (the generator's parameters do not apply and keep their defaults)."""
    if path.is_dir():
        inp = read_tables(path)
    else:
        try:
            doc = load_federation(path)
        except FederationFileError as exc:
            raise LargeInputError(str(path), "(file)", str(exc)) from exc
        inp = from_federation(doc)
    size = inp.fed.size
    spec = LargeSweep(
        name=f"large-{path.stem}",
        description=f"{size:,} participants read from {path}, simulated in rounds on Spark.",
        participants=size,
        contracts_per_participant=round(2 * inp.fed.edge_a.size / size),
        max_rounds=max_rounds,
        source=str(path),
    )
    return spec, inp
