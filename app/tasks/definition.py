"""One rule for a whole task, from the API or a federation file. Pure: no ORM, no web.

A task is a catalogue fragment (``fragment``, ``params``: ``app.tasks.catalogue``), its owner's
own work (``source``, ``sql`` or ``python``: ``app.work.spec``) or, running nothing, synthetic:
a declared load the market moves. :func:`define_task` checks every field against the tasks it
reads and says what the registry stores: the normalised work, the synthetic flag, the load and
the schema of the task's output stream (what its readers' SQL is checked against).

What the registry cannot see is left to where it can be seen. A ``files`` source's directory
is on the owner's host: a federation file is applied on the operator's host, which may check
it (``check_paths``; ``fedload contracts apply`` does); a task registered over REST is checked
by the owner's agent when it starts the source, which reports a missing directory as the
task's ``analysis_error``. Likewise Spark's analysis of a query, and its output schema where
sqlglot could not infer it, come from the owner's agent (``PUT /v1/tasks/{name}/analysis``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from app.tasks.catalogue import (
    CATALOGUE,
    STREAM_SCHEMAS,
    FragmentError,
    Upstream,
    validate_fragment,
)
from app.work.spec import (
    STIME,
    WORK_FIELDS,
    StreamSchema,
    Work,
    check_unreserved,
    parse_ddl,
    parse_work,
)
from app.work.sql_check import check_sql

Lookup = Callable[[str], Upstream | None]


@dataclass(frozen=True)
class TaskDefinition:
    """What the registry stores of a checked task."""

    load: float
    synthetic: bool
    fragment: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    work: Work = field(default_factory=Work)
    output_schema: StreamSchema | None = None

    @property
    def output_ddl(self) -> str | None:
        kind = CATALOGUE.get(self.fragment or "")
        if kind is not None:
            # The catalogue's spelling, as spark_jobs.fragments.catalogue pins it.
            return STREAM_SCHEMAS[kind.writes]
        return None if self.output_schema is None else self.output_schema.ddl()


def installed_distributions() -> dict[str, str]:
    """Python distributions installed here, name -> version: a python fragment naming one
    without ``==version`` is recorded with the version found here."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(str(name), dist.version)
    return found


def stream_schema(
    fragment: str | None, work: Mapping[str, Any], output_schema: str | None
) -> StreamSchema | None:
    """The columns of a task's output stream, as stored (None: not known yet)."""
    if output_schema:
        return parse_ddl(output_schema, ("output_schema",))
    kind = CATALOGUE.get(fragment or "")
    return None if kind is None else parse_ddl(STREAM_SCHEMAS[kind.writes], ("fragment",))


def event_time(work: Mapping[str, Any]) -> str:
    """The event-time column of a task's output stream: a source's declared one; every other
    stream carries the federation's own, ``stime``."""
    source = work.get("source")
    if isinstance(source, Mapping) and isinstance(source.get("event_time"), str):
        return str(source["event_time"])
    return STIME


def define_task(
    raw: Mapping[str, Any],
    *,
    name: str,
    owner: str,
    upstream: Lookup,
    distributions: Mapping[str, str] | None = None,
    check_paths: bool = False,
) -> TaskDefinition:
    """Check a task as given (``load``, ``synthetic``, ``fragment``, ``params``, ``inputs``
    as ``[{"task": name}]``, and the work fields) and normalise it.

    ``upstream`` looks tasks up by name (the registry's, or a file's); ``distributions``: the
    installed ones (None: read them here, when a python fragment gives no version).
    Raises :class:`FragmentError` at the field that is wrong."""
    if raw.get("python") is not None and distributions is None:
        distributions = installed_distributions()
    work = parse_work({k: raw.get(k) for k in WORK_FIELDS}, distributions=distributions or {})
    runs = work.source is not None or work.is_fragment
    fragment = raw.get("fragment")
    if fragment is not None and (runs or work.to_json()):
        extra = next(k for k in WORK_FIELDS if raw.get(k) is not None)
        raise FragmentError(
            "a task runs a catalogue fragment or its own work (source, sql, python), not both",
            (extra,),
        )
    if not runs:
        leftover = next((k for k in WORK_FIELDS if raw.get(k) is not None), None)
        if leftover is not None:
            raise FragmentError(
                f"{leftover} belongs to a fragment (sql or python); this task runs none",
                (leftover,),
            )
    synthetic = fragment is None and not runs
    _check_synthetic_flag(raw.get("synthetic"), synthetic, work, fragment)
    load = raw.get("load")
    if synthetic and load is None:
        raise FragmentError(
            "a synthetic task declares its load (load: <load units>); a real one is measured",
            ("load",),
        )
    load = 0.0 if load is None else float(load)
    inputs = list(raw.get("inputs") or [])
    if fragment is not None or synthetic:
        params = validate_fragment(
            fragment, raw.get("params"), inputs, task=name, owner=owner, upstream=upstream
        )
        kind = CATALOGUE[fragment] if fragment is not None else None
        schema = None if kind is None else parse_ddl(STREAM_SCHEMAS[kind.writes], ("fragment",))
        names = tuple(str(i["task"]) for i in inputs)
        return TaskDefinition(load, synthetic, fragment, params, names, Work(), schema)
    if raw.get("params"):
        raise FragmentError(
            "params configure a catalogue fragment; this task runs its own work", ("params",)
        )
    if work.source is not None:
        if inputs:
            raise FragmentError(
                "a source reads no inputs; it is where a stream enters", ("inputs",)
            )
        if check_paths:
            _check_source_path(work)
        return TaskDefinition(load, False, work=work, output_schema=work.source.schema.with_stime())
    read = _inputs(work, inputs, name, owner, upstream)
    return TaskDefinition(
        load,
        False,
        inputs=tuple(n for n, _ in read),
        work=work,
        output_schema=_fragment_output(work, read),
    )


def _check_synthetic_flag(given: Any, synthetic: bool, work: Work, fragment: str | None) -> None:
    if given is None or bool(given) == synthetic:
        return
    if given:
        what = f"fragment {fragment!r}" if fragment is not None else work.kind
        raise FragmentError(
            f"a synthetic task runs nothing, but this one runs {what}; drop one", ("synthetic",)
        )
    raise FragmentError(
        "synthetic: false, but the task runs nothing: give source, sql, python or a fragment",
        ("synthetic",),
    )


def _check_source_path(work: Work) -> None:
    """A files source's directory, seen from the host applying the file (the operator's)."""
    assert work.source is not None
    path = work.source.options.get("path")
    if work.source.kind == "files" and isinstance(path, str) and not os.path.isdir(path):
        raise FragmentError(
            f"directory {path!r} does not exist (a files source reads a directory on its "
            "owner's host)",
            ("source", "path"),
        )


def _inputs(
    work: Work, inputs: Sequence[Any], task: str, owner: str, upstream: Lookup
) -> list[tuple[str, StreamSchema | None]]:
    """Each input of a fragment with its stream's schema, once every one is a stream of the
    same owner and the streams can be merged into one."""
    if not inputs:
        raise FragmentError(
            f"a {work.kind} fragment reads at least one input (inputs: [{{task: <name>}}])",
            ("inputs",),
        )
    read: list[tuple[str, StreamSchema | None]] = []
    for i, item in enumerate(inputs):
        where = ("inputs", i, "task")
        name = item.get("task") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name:
            raise FragmentError("an input is {task: <task name>}", where)
        if name == task:
            raise FragmentError(f"task {name!r} cannot read its own output", where)
        if any(name == seen for seen, _ in read):
            raise FragmentError(f"task {name!r} is listed twice", where)
        try:
            found = upstream(name)
        except FragmentError as exc:
            raise FragmentError(exc.detail, where) from exc
        if found is None or found.owner != owner:
            raise FragmentError(f"{owner} owns no task named {name!r}", where)
        if found.fragment is None and not found.work:
            raise FragmentError(
                f"task {name!r} is synthetic (a declared load), so it has no output stream to read",
                where,
            )
        schema = stream_schema(found.fragment, found.work, found.output_schema)
        _check_mergeable(read, name, schema, where)
        read.append((name, schema))
    return read


def _check_mergeable(
    read: list[tuple[str, StreamSchema | None]],
    name: str,
    schema: StreamSchema | None,
    where: tuple[str | int, ...],
) -> None:
    """Several inputs are merged into one stream (SUnion, bucket by bucket): the same columns
    with the same types, in the same order."""
    first = next(((n, s) for n, s in read if s is not None), None)
    if first is None or schema is None:
        return
    other, expected = first
    for i in range(max(len(expected.columns), len(schema.columns))):
        a = expected.columns[i] if i < len(expected.columns) else None
        b = schema.columns[i] if i < len(schema.columns) else None
        if a is not None and b is not None and (a.name.lower(), a.type) == (b.name.lower(), b.type):
            continue
        if a is None:
            assert b is not None
            differs = f"{name} has column {b.name!r} ({b.type}), {other} has none"
        elif b is None or a.name.lower() != b.name.lower():
            found = "none" if b is None else f"{b.name!r}"
            differs = f"column {i + 1} is {a.name!r} in {other}, {found} in {name}"
        else:
            differs = f"column {a.name!r} is {a.type} in {other}, {b.type} in {name}"
        raise FragmentError(
            f"inputs {other} and {name} are merged into one stream, so their schemas must "
            f"match: {differs}",
            where,
        )


def _fragment_output(
    work: Work, read: list[tuple[str, StreamSchema | None]]
) -> StreamSchema | None:
    if work.sql is not None:
        # Each input is a view named by its local name (``A.readings`` -> ``readings``).
        views = {name.rpartition(".")[2]: schema for name, schema in read}
        analysis = check_sql(work.sql, views)
        if analysis.output is not None:
            return check_unreserved(analysis.output, ("sql",)).with_stime()
    return None if work.schema is None else work.schema.with_stime()
