"""What a participant's task runs, described for the registry. Pure: no Spark, no ORM, no web.

A task is one of:

- a **source**: a stream entering the federation at its owner's host (``source:``), from the
  seeded generator, a directory of files, a NATS JetStream stream, or batches an application
  publishes over Flight. Every source declares its schema (a Spark DDL string) and the column
  that is its event time;
- a **fragment** over the output streams of other tasks of the same owner (``inputs:``): Spark
  SQL (``sql:``, data that any partner runs as it is) or a Python function from an installed
  distribution (``python: "package.module:function"``, with ``distribution``), optionally
  written to a ``sink:`` at the owner's host (Parquet, a NATS subject) besides the owner's log;
- **synthetic**: a declared load that the market moves and nothing runs (``synthetic: true``).

The registry stores the normalised form (:meth:`Work.to_json`) in the task's ``work`` column and
the stream schema its output carries (``output_schema``). ``app.work.sql_check`` checks SQL
against the inputs' schemas; the Spark side (``spark_jobs.fragments``, ``spark_jobs.sources``,
``spark_jobs.sinks``) builds the real query, source and sink from the same record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.work.errors import FragmentError

SOURCE_KINDS = ("generator", "files", "nats", "flight")
FILE_FORMATS = ("json", "csv", "parquet")
SINK_KINDS = ("log", "parquet", "nats")
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
# The seeded generator's connection records (the network-monitoring fragments read them).
GENERATOR_SCHEMA = "src_ip STRING, dst_ip STRING, dst_port INT, stime TIMESTAMP"
# The federation's own event-time column in every log (SUnion buckets by it); a source fills it
# from its declared event-time column, a fragment's output from its window's end.
STIME = "stime"

_SIMPLE_TYPES = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "smallint": "smallint",
    "short": "smallint",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "float": "float",
    "real": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
}
# Columns the federation's logs use for themselves: a row's tuple kind (STABLE, TENTATIVE, ...),
# which SUnion fills in and sinks filter on, and the input a merged row came from. A stream of a
# participant's that had one would have it overwritten, or its rows dropped as not stable.
RESERVED_COLUMNS = ("kind", "fedload_input")
NUMERIC_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double")
_INTERVAL = re.compile(
    r"^\s*\d+(\.\d+)?\s+(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)
_PYTHON_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_]\w*$")
_DISTRIBUTION = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(==([A-Za-z0-9.+!_-]+))?$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark's type in its DDL spelling, lower case: "string", "decimal(10,2)", ...


@dataclass(frozen=True)
class StreamSchema:
    """The declared columns of a stream, in order."""

    columns: tuple[Column, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def get(self, name: str) -> Column | None:
        """A column by name, case-insensitively as Spark resolves them."""
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)

    def ddl(self) -> str:
        return ", ".join(f"{_quoted(c.name)} {c.type}" for c in self.columns)

    def with_stime(self) -> StreamSchema:
        """The schema of the stream's log: the declared columns and ``stime``."""
        if self.get(STIME) is not None:
            return self
        return StreamSchema((*self.columns, Column(STIME, "timestamp")))


def _quoted(name: str) -> str:
    return name if _IDENTIFIER.match(name) else f"`{name.replace('`', '``')}`"


def parse_ddl(text: Any, path: Sequence[str | int]) -> StreamSchema:
    """``"station STRING, ts TIMESTAMP, temp DOUBLE"`` -> a :class:`StreamSchema`.

    Spark's DDL for a struct's fields: names (backticks for odd ones), simple types, DECIMAL(p,s)
    and the nested ARRAY<...>, MAP<..., ...> and STRUCT<name: type, ...>. Raises
    :class:`FragmentError` at ``path`` naming the column that is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise FragmentError("a schema is a Spark DDL string, e.g. 'id BIGINT, ts TIMESTAMP'", path)
    columns: list[Column] = []
    for part in split_top(text, ","):
        part = part.strip()
        if not part:
            raise FragmentError(f"an empty column in schema {text!r}", path)
        name, rest = _column_name(part, path)
        kind = _type(rest.strip(), name, path)
        if any(c.name.lower() == name.lower() for c in columns):
            raise FragmentError(f"column {name!r} is declared twice", path)
        columns.append(Column(name, kind))
    return StreamSchema(tuple(columns))


def split_top(text: str, separator: str = ",") -> list[str]:
    """Split at ``separator`` outside <...>, (...) and backticks."""
    parts: list[str] = []
    current: list[str] = []
    depth, quoted = 0, False
    for char in text:
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "<(":
            depth += 1
        elif not quoted and char in ">)":
            depth -= 1
        if char == separator and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _column_name(part: str, path: Sequence[str | int]) -> tuple[str, str]:
    if part.startswith("`"):
        end = part.find("`", 1)
        if end < 0:
            raise FragmentError(f"an unclosed backtick in {part!r}", path)
        return part[1:end], part[end + 1 :].lstrip(": ")
    pieces = part.replace(":", " ", 1).split(None, 1)
    if len(pieces) != 2:
        raise FragmentError(f"column {part!r} has no type (write 'name TYPE')", path)
    if not _IDENTIFIER.match(pieces[0]):
        raise FragmentError(f"{pieces[0]!r} is not a column name (quote it with backticks)", path)
    return pieces[0], pieces[1]


def _type(text: str, column: str, path: Sequence[str | int]) -> str:
    lowered = text.lower().strip()
    # NOT NULL and COMMENT are allowed by Spark's DDL and mean nothing to a stream's rows here.
    lowered = re.sub(r"\s+not\s+null\b.*$|\s+comment\s+.*$", "", lowered)
    if lowered in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[lowered]
    decimal = re.fullmatch(r"(decimal|dec|numeric)\s*(\(\s*(\d+)\s*(,\s*(\d+)\s*)?\))?", lowered)
    if decimal:
        precision, scale = decimal.group(3) or "10", decimal.group(5) or "0"
        if not 1 <= int(precision) <= 38 or int(scale) > int(precision):
            raise FragmentError(f"column {column!r}: {text} is not a valid DECIMAL", path)
        return f"decimal({precision},{scale})"
    nested = re.fullmatch(r"(array|map|struct)\s*<(.*)>", text.strip(), re.DOTALL | re.IGNORECASE)
    if nested:
        outer, inner = nested.group(1).lower(), nested.group(2)
        if outer == "array":
            return f"array<{_type(inner, column, path)}>"
        if outer == "map":
            parts = split_top(inner, ",")
            if len(parts) != 2:
                raise FragmentError(f"column {column!r}: MAP takes a key and a value type", path)
            key, value = (_type(p, column, path) for p in parts)
            return f"map<{key},{value}>"
        fields = [_column_name(f.strip(), path) for f in split_top(inner, ",") if f.strip()]
        inner_types = ",".join(f"{_quoted(n)}:{_type(t.strip(), column, path)}" for n, t in fields)
        return f"struct<{inner_types}>"
    raise FragmentError(f"column {column!r} has an unknown type {text!r}", path)


def check_unreserved(schema: StreamSchema, path: Sequence[str | int]) -> StreamSchema:
    """A participant's columns must not be named as the federation's own (RESERVED_COLUMNS)."""
    for column in schema.columns:
        if column.name.lower() in RESERVED_COLUMNS:
            raise FragmentError(
                f"column {column.name!r} is reserved for the federation's logs "
                f"({', '.join(RESERVED_COLUMNS)}); rename it (e.g. with AS)",
                path,
            )
    return schema


# A batch more often than this is mostly fixed cost; one less often holds a move or a failover
# back that long (a query stops between batches).
MIN_TRIGGER_SECONDS = 0.1
MAX_TRIGGER_SECONDS = 60.0
_UNIT_SECONDS = {
    "millisecond": 0.001,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}


def interval_seconds(interval: str) -> float:
    """A checked interval (``"2 seconds"``, ``"500 milliseconds"``) in seconds."""
    number, unit = interval.split()
    return float(number) * _UNIT_SECONDS[unit.lower().rstrip("s")]


def check_interval(value: Any, path: Sequence[str | int]) -> str:
    """A Spark interval such as ``"10 seconds"`` or ``"1 hour"``."""
    if not isinstance(value, str) or not _INTERVAL.match(value):
        raise FragmentError(
            f"{value!r} is not an interval like '10 seconds', '5 minutes' or '1 hour'", path
        )
    return value.strip()


@dataclass(frozen=True)
class SourceSpec:
    kind: str
    schema: StreamSchema
    event_time: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "schema": self.schema.ddl(),
            "event_time": self.event_time,
            **self.options,
        }


@dataclass(frozen=True)
class SinkSpec:
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.options}


@dataclass(frozen=True)
class Work:
    """What a task runs. Exactly one of ``source``, ``sql``, ``python`` is set, or none for a
    synthetic task (a declared load)."""

    source: SourceSpec | None = None
    sql: str | None = None
    python: str | None = None
    # The Python distribution providing ``python`` and the version the task was registered
    # with; an agent runs it only when its operator allows the distribution.
    distribution: str | None = None
    distribution_version: str | None = None
    # How late an input row may be, on the inputs' event-time columns (a fragment's windows
    # close this long after their end).
    watermark: str | None = None
    # How often the fragment's query runs a micro-batch (Spark's processing-time trigger); None:
    # the agent's default. Each batch has a fixed cost whatever it reads, so a query that can
    # wait longer between batches costs its host less.
    trigger: str | None = None
    # The declared output schema (required for Python fragments: nothing runs at the registry).
    schema: StreamSchema | None = None
    sink: SinkSpec | None = None

    @property
    def kind(self) -> str:
        if self.source is not None:
            return f"source:{self.source.kind}"
        if self.sql is not None:
            return "sql"
        if self.python is not None:
            return "python"
        return "synthetic"

    @property
    def is_source(self) -> bool:
        return self.source is not None

    @property
    def is_fragment(self) -> bool:
        return self.sql is not None or self.python is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.source is not None:
            out["source"] = self.source.to_json()
        if self.sql is not None:
            out["sql"] = self.sql
        if self.python is not None:
            out["python"] = self.python
            out["distribution"] = self.distribution
            out["distribution_version"] = self.distribution_version
        if self.watermark is not None:
            out["watermark"] = self.watermark
        if self.trigger is not None:
            out["trigger"] = self.trigger
        if self.schema is not None:
            out["schema"] = self.schema.ddl()
        if self.sink is not None:
            out["sink"] = self.sink.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Work:
        """The stored form back (trusted: it was checked by :func:`parse_work`)."""
        if not data:
            return cls()
        return parse_work(data, distributions=None)


WORK_FIELDS = (
    "source",
    "sql",
    "python",
    "distribution",
    "watermark",
    "trigger",
    "schema",
    "sink",
)


def parse_work(
    raw: Mapping[str, Any],
    *,
    distributions: Mapping[str, str] | None,
    path: Sequence[str | int] = (),
) -> Work:
    """Check the work fields of a task (``source``, ``sql``, ``python``, ...) and normalise them.

    ``distributions``: installed distribution name -> version, to resolve a Python fragment's
    ``distribution`` when it gives no version (None: trust what is written, the stored form).
    Inputs and the SQL's columns are checked by the caller, which knows the other tasks."""
    base = tuple(path)
    given = [k for k in ("source", "sql", "python") if raw.get(k) is not None]
    if len(given) > 1:
        raise FragmentError(
            f"a task runs one thing: give source, sql or python, not {' and '.join(given)}",
            (*base, given[1]),
        )
    source = None if raw.get("source") is None else _source(raw["source"], (*base, "source"))
    sql = None
    if raw.get("sql") is not None:
        if not isinstance(raw["sql"], str) or not raw["sql"].strip():
            raise FragmentError("sql is the text of a Spark SQL query", (*base, "sql"))
        sql = raw["sql"].strip()
    python, distribution, version = None, None, None
    if raw.get("python") is not None:
        python = raw["python"]
        if not isinstance(python, str) or not _PYTHON_REF.match(python):
            raise FragmentError(
                f"python is 'package.module:function', got {python!r}", (*base, "python")
            )
        distribution, version = _distribution(raw, distributions, base)
    elif raw.get("distribution") is not None:
        raise FragmentError(
            "distribution names where a python fragment comes from; this task has none",
            (*base, "distribution"),
        )
    watermark = None
    if raw.get("watermark") is not None:
        if sql is None and python is None:
            raise FragmentError("a watermark is for a fragment over inputs", (*base, "watermark"))
        watermark = check_interval(raw["watermark"], (*base, "watermark"))
    trigger = None
    if raw.get("trigger") is not None:
        if sql is None and python is None:
            raise FragmentError("a trigger is for a fragment over inputs", (*base, "trigger"))
        trigger = check_interval(raw["trigger"], (*base, "trigger"))
        if not MIN_TRIGGER_SECONDS <= interval_seconds(trigger) <= MAX_TRIGGER_SECONDS:
            raise FragmentError(
                f"trigger is between {MIN_TRIGGER_SECONDS:g} and {MAX_TRIGGER_SECONDS:g} "
                f"seconds, got {trigger!r}",
                (*base, "trigger"),
            )
    schema = None
    if raw.get("schema") is not None:
        if source is not None:
            raise FragmentError("a source's schema goes inside source:", (*base, "schema"))
        schema = check_unreserved(parse_ddl(raw["schema"], (*base, "schema")), (*base, "schema"))
    if python is not None and schema is None and raw.get("distribution_version") is None:
        raise FragmentError(
            "a python fragment declares its output schema (schema: 'name TYPE, ...')",
            (*base, "schema"),
        )
    sink = None if raw.get("sink") is None else _sink(raw["sink"], (*base, "sink"))
    if sink is not None and source is not None:
        raise FragmentError("a sink writes a fragment's output; a source has none", (*base, "sink"))
    return Work(
        source=source,
        sql=sql,
        python=python,
        distribution=distribution,
        distribution_version=version,
        watermark=watermark,
        trigger=trigger,
        schema=schema,
        sink=sink,
    )


def _distribution(
    raw: Mapping[str, Any], installed: Mapping[str, str] | None, base: tuple[str | int, ...]
) -> tuple[str, str]:
    where = (*base, "distribution")
    text = raw.get("distribution")
    if not isinstance(text, str) or not _DISTRIBUTION.match(text.strip()):
        raise FragmentError(
            "a python fragment names its distribution: 'name' or 'name==version'", where
        )
    match = _DISTRIBUTION.match(text.strip())
    assert match is not None
    name, version = match.group(1), match.group(3)
    stored = raw.get("distribution_version")
    if version is None and isinstance(stored, str):
        version = stored
    if version is None:
        found = None if installed is None else _installed(installed, name)
        if found is None:
            raise FragmentError(
                f"unknown distribution {name!r}: it is not installed here; write "
                f"'{name}==<version>'",
                where,
            )
        version = found
    return name, version


def _installed(installed: Mapping[str, str], name: str) -> str | None:
    def canonical(text: str) -> str:
        return re.sub(r"[-_.]+", "-", text).lower()

    wanted = canonical(name)
    return next((v for k, v in installed.items() if canonical(k) == wanted), None)


def _options(
    raw: Mapping[str, Any],
    allowed: Mapping[str, type | tuple[type, ...]],
    required: Sequence[str],
    kind: str,
    base: tuple[str | int, ...],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("kind", "schema", "event_time"):
            continue
        if key not in allowed:
            known = ", ".join(sorted(allowed)) or "nothing else"
            raise FragmentError(f"a {kind} takes no {key!r}; it takes {known}", (*base, key))
        types = allowed[key]
        if isinstance(value, bool) and bool not in (
            types if isinstance(types, tuple) else (types,)
        ):
            raise FragmentError(f"{key} must be {_type_name(types)}, got {value!r}", (*base, key))
        if not isinstance(value, types):
            raise FragmentError(f"{key} must be {_type_name(types)}, got {value!r}", (*base, key))
        out[key] = value
    for key in required:
        if key not in out:
            raise FragmentError(f"a {kind} needs {key!r}", (*base, key))
    return out


def _type_name(types: type | tuple[type, ...]) -> str:
    names = [t.__name__ for t in (types if isinstance(types, tuple) else (types,))]
    return {"str": "a string", "int": "a whole number", "float": "a number"}.get(
        names[0], " or ".join(names)
    )


# How a source closes its buckets (``spark_jobs.sources.buckets``): ``lateness``, how far behind
# its latest event time a bucket stays open for late rows; ``idle_advance``, whether its event
# times track the wall clock, so that it closes buckets while no rows come.
_TIMING: dict[str, type | tuple[type, ...]] = {"lateness": str, "idle_advance": bool}
_SOURCE_OPTIONS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "generator": {
        "seed": int,
        "rate": (int, float),
        "seconds": int,
        "scan_rate": (int, float),
        "rate_after": (int, float),
        "rate_from": int,
    },
    "files": {
        "format": str,
        "path": str,
        "max_files_per_trigger": int,
        "header": bool,
        **_TIMING,
    },
    "nats": {"url": str, "stream": str, "subject": str, **_TIMING},
    "flight": dict(_TIMING),
}
_SOURCE_REQUIRED = {"generator": (), "files": ("format", "path"), "nats": ("stream",), "flight": ()}


def _source(raw: Any, base: tuple[str | int, ...]) -> SourceSpec:
    if not isinstance(raw, Mapping):
        raise FragmentError("source is {kind: files|nats|flight|generator, ...}", base)
    kind = raw.get("kind")
    if kind not in SOURCE_KINDS:
        raise FragmentError(
            f"unknown source kind {kind!r}; known: {', '.join(SOURCE_KINDS)}", (*base, "kind")
        )
    options = _options(raw, _SOURCE_OPTIONS[kind], _SOURCE_REQUIRED[kind], f"{kind} source", base)
    if kind == "generator":
        # The generator's rows are fixed (connection records): its schema is its own. The
        # stored form (``Work.to_json``) writes it out, so that one is read back as it is.
        own = parse_ddl(GENERATOR_SCHEMA, (*base, "schema"))
        given = raw.get("schema")
        if given is not None and (not isinstance(given, str) or given != own.ddl()):
            raise FragmentError("the generator's schema is its own; give none", (*base, "schema"))
        return SourceSpec(kind, own, STIME, options)
    if kind == "files" and options["format"] not in FILE_FORMATS:
        raise FragmentError(
            f"unknown file format {options['format']!r}; known: {', '.join(FILE_FORMATS)}",
            (*base, "format"),
        )
    if kind == "nats":
        options.setdefault("url", DEFAULT_NATS_URL)
    if "lateness" in options:
        options["lateness"] = check_interval(options["lateness"], (*base, "lateness"))
    if raw.get("schema") is None:
        raise FragmentError(
            f"a {kind} source declares its schema (schema: 'name TYPE, ...')", (*base, "schema")
        )
    schema = check_unreserved(parse_ddl(raw["schema"], (*base, "schema")), (*base, "schema"))
    event_time = raw.get("event_time")
    if not isinstance(event_time, str) or not event_time:
        raise FragmentError(
            "a source names its event-time column (event_time: <a TIMESTAMP column>)",
            (*base, "event_time"),
        )
    column = schema.get(event_time)
    if column is None:
        raise FragmentError(
            f"event_time {event_time!r} is not a column of the schema ({', '.join(schema.names)})",
            (*base, "event_time"),
        )
    if column.type not in ("timestamp", "timestamp_ntz"):
        raise FragmentError(
            f"event_time {event_time!r} must be a TIMESTAMP column, not {column.type.upper()}",
            (*base, "event_time"),
        )
    return SourceSpec(kind, schema, column.name, options)


_SINK_OPTIONS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "log": {},
    "parquet": {"path": str},
    "nats": {"url": str, "subject": str, "stream": str},
}
_SINK_REQUIRED = {"log": (), "parquet": ("path",), "nats": ("subject",)}


def _sink(raw: Any, base: tuple[str | int, ...]) -> SinkSpec:
    if not isinstance(raw, Mapping):
        raise FragmentError("sink is {kind: parquet|nats|log, ...}", base)
    kind = raw.get("kind")
    if kind not in SINK_KINDS:
        raise FragmentError(
            f"unknown sink kind {kind!r}; known: {', '.join(SINK_KINDS)}", (*base, "kind")
        )
    for key in ("schema", "event_time"):
        if key in raw:
            raise FragmentError(f"a sink takes no {key!r}", (*base, key))
    options = _options(raw, _SINK_OPTIONS[kind], _SINK_REQUIRED[kind], f"{kind} sink", base)
    if kind == "nats":
        options.setdefault("url", DEFAULT_NATS_URL)
    return SinkSpec(kind, options)
