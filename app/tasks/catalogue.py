"""The fragments fedload ships, described for the registry. Pure: no Spark, no ORM, no web.

A task may name one of these kinds (``fragment``), its parameters (``params``) and the tasks
whose output streams it reads (``inputs``). The registry and the federation-file loader check
all three here, so an API call and a contract file are held to one rule; the Spark side
(``spark_jobs.fragments`` and ``spark_jobs.generators``) builds the real query from the same
names. A task without a fragment is a declared load only: the market moves it, nothing runs.

Streams are typed by what their rows are (``connections``, ``port_counts``, ...): a fragment
reads only the kind it was written for, so a task cannot be wired to an input whose columns
its query does not have (prefix_scanners reads distinct_ports_per_source's output, not raw
connections).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.work.errors import FragmentError
from app.work.spec import GENERATOR_SCHEMA

# Stream kinds: what the rows of a fragment's output are.
CONNECTIONS = "connections"  # (src_ip, dst_ip, dst_port, stime), the generator's records
CONNECTION_COUNTS = "connection_counts"  # (stime, window_start, src_ip, connections)
PORT_COUNTS = "port_counts"  # (stime, window_start, src_ip, ports): the port scanners
PREFIX_COUNTS = "prefix_counts"  # (stime, window_start, prefix, scanners, ports)

# Each stream kind's columns as a Spark DDL string (what a SQL fragment reading it may name);
# spark_jobs.fragments.catalogue's StructTypes are the same, pinned by tests/unit/fragments.
STREAM_SCHEMAS: Mapping[str, str] = {
    CONNECTIONS: GENERATOR_SCHEMA,
    CONNECTION_COUNTS: "stime TIMESTAMP, window_start TIMESTAMP, src_ip STRING, connections BIGINT",
    PORT_COUNTS: "stime TIMESTAMP, window_start TIMESTAMP, src_ip STRING, ports INT",
    PREFIX_COUNTS: (
        "stime TIMESTAMP, window_start TIMESTAMP, prefix STRING, scanners BIGINT, ports BIGINT"
    ),
}

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Param:
    """One parameter: an int or a float, with a lower bound and a default (None = optional)."""

    name: str
    type: type[int] | type[float]
    default: int | float | None
    minimum: float
    # True: the value must be above ``minimum``; False: at or above it.
    exclusive: bool = False
    description: str = ""

    def check(self, value: Any, path: Path) -> int | float:
        # bool is an int to Python, never a number to a user.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FragmentError(f"{self.name} must be a number, got {value!r}", path)
        if self.type is int:
            if isinstance(value, float) and not value.is_integer():
                raise FragmentError(f"{self.name} must be a whole number, got {value!r}", path)
            value = int(value)
        else:
            if not math.isfinite(value):
                raise FragmentError(f"{self.name} must be finite, got {value!r}", path)
            value = float(value)
        below = value <= self.minimum if self.exclusive else value < self.minimum
        if below:
            bound = "greater than" if self.exclusive else "at least"
            raise FragmentError(
                f"{self.name} must be {bound} {self.minimum:g}, got {value!r}", path
            )
        return value


@dataclass(frozen=True)
class FragmentKind:
    name: str
    description: str
    params: tuple[Param, ...]
    # What the output rows are, and what the inputs' rows must be (None: a source, no inputs).
    writes: str
    reads: str | None = None
    # A source reads nothing; every other fragment reads at least one stream (several are
    # merged by SUnion, bucket by bucket).
    min_inputs: int = field(default=1)

    @property
    def is_source(self) -> bool:
        return self.reads is None

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


def _window(default: int) -> Param:
    return Param(
        "window_seconds", int, default, 1, description="Tumbling event-time window, seconds."
    )


CATALOGUE: Mapping[str, FragmentKind] = {
    kind.name: kind
    for kind in (
        FragmentKind(
            name="generator",
            description=(
                "A source of synthetic connection records (Zipf-skewed sources, a few port "
                "scanners), the same rows for the same seed."
            ),
            params=(
                Param("seed", int, 7, 0, description="Every record derives from it."),
                Param("rate", float, 60.0, 0, exclusive=True, description="Rows per second."),
                Param(
                    "seconds",
                    int,
                    None,
                    1,
                    description="Stop after this many seconds of records; absent: run on.",
                ),
                Param("scan_rate", float, 6.0, 0, description="Ports each scanner probes per s."),
                Param(
                    "rate_after",
                    float,
                    None,
                    0,
                    exclusive=True,
                    description="Rows per second from second rate_from on (the input rising "
                    "or falling mid-run, the same rows for the same seed).",
                ),
                Param(
                    "rate_from",
                    int,
                    None,
                    1,
                    description="The generator's second at which rate_after takes over.",
                ),
            ),
            writes=CONNECTIONS,
            reads=None,
            min_inputs=0,
        ),
        FragmentKind(
            name="connections_per_source",
            description=(
                "Source IPs that opened more than `threshold` connections in a window "
                "(network monitoring, query a)."
            ),
            params=(
                _window(10),
                Param("threshold", int, 25, 0, description="Report sources above this count."),
            ),
            writes=CONNECTION_COUNTS,
            reads=CONNECTIONS,
        ),
        FragmentKind(
            name="distinct_ports_per_source",
            description=(
                "Source IPs that reached more than `threshold` distinct destination ports in a "
                "window: port scanners (network monitoring, query b)."
            ),
            params=(
                _window(10),
                Param("threshold", int, 10, 0, description="Report sources above this count."),
            ),
            writes=PORT_COUNTS,
            reads=CONNECTIONS,
        ),
        FragmentKind(
            name="prefix_scanners",
            description=(
                "Per /24 prefix and window, how many port scanners it holds; reads "
                "distinct_ports_per_source's output (network monitoring, query c)."
            ),
            # spark_jobs.fragments.prefix_scanner_counts's parameters. Its window defaults to
            # 60 s there; the catalogue's windows are the demo's second-scale ones, as for the
            # two fragments it reads from (whose functions also default to 60 s).
            params=(
                _window(10),
                Param("min_scanners", int, 1, 1, description="Report prefixes with at least this."),
            ),
            writes=PREFIX_COUNTS,
            reads=PORT_COUNTS,
        ),
    )
}


def served_where_it_runs(fragment: str | None) -> bool:
    """Where a task's output stream is served: a source's on the endpoint of the participant
    that runs it (its publisher writes there: a source placed on a partner is input produced
    at that partner), any other task's on its owner's (the log stays put while the fragment
    moves). The registry's token rules and ``TaskInputRead.served_by`` both ask here."""
    kind = CATALOGUE.get(fragment or "")
    return kind is not None and kind.is_source


@dataclass(frozen=True)
class Upstream:
    """What the rule needs to know of a task named as an input."""

    name: str
    owner: str
    fragment: str | None
    # A task's own work (app.work.spec.Work.to_json; empty: a catalogue fragment or a
    # declared load) and the columns of its output stream as Spark DDL (None: not known yet).
    work: Mapping[str, Any] = field(default_factory=dict)
    output_schema: str | None = None


def input_names(inputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The task names of stored inputs (``[{"task": "A.conns"}]`` -> ``["A.conns"]``)."""
    return [str(i["task"]) for i in inputs]


def validate_fragment(
    fragment: str | None,
    params: Mapping[str, Any] | None,
    inputs: Sequence[Mapping[str, Any]] | None,
    *,
    task: str | None = None,
    owner: str | None = None,
    upstream: Callable[[str], Upstream | None] | None = None,
) -> dict[str, Any]:
    """Check a task's fragment, parameters and inputs; return the parameters with defaults.

    ``inputs`` are ``{"task": name}`` mappings. With ``upstream`` (a lookup of tasks by name),
    each input must be another task of the same ``owner`` that runs a fragment writing what
    this one reads; a name that is unknown or someone else's gets the same answer, so the
    rule never tells a participant what others own. Raises :class:`FragmentError`.
    """
    params = dict(params or {})
    inputs = list(inputs or [])
    if fragment is None:
        # A declared load: nothing runs, so nothing to configure or to read.
        if params:
            raise FragmentError("params configure a fragment; this task names none", ["params"])
        if inputs:
            raise FragmentError("inputs feed a fragment; this task names none", ["inputs"])
        return {}
    kind = CATALOGUE.get(fragment)
    if kind is None:
        known = ", ".join(sorted(CATALOGUE))
        raise FragmentError(f"unknown fragment {fragment!r}; known: {known}", ["fragment"])
    normalised = _params(kind, params)
    _check_inputs(kind, inputs, task, owner, upstream)
    return normalised


def _params(kind: FragmentKind, params: dict[str, Any]) -> dict[str, Any]:
    for name in params:
        if kind.param(name) is None:
            allowed = ", ".join(p.name for p in kind.params)
            raise FragmentError(
                f"{kind.name} has no parameter {name!r}; it takes {allowed}", ["params", name]
            )
    out: dict[str, Any] = {}
    for param in kind.params:
        if param.name in params and params[param.name] is not None:
            out[param.name] = param.check(params[param.name], ("params", param.name))
        elif param.default is not None:
            out[param.name] = param.default
    return out


def _check_inputs(
    kind: FragmentKind,
    inputs: list[Mapping[str, Any]],
    task: str | None,
    owner: str | None,
    upstream: Callable[[str], Upstream | None] | None,
) -> None:
    if kind.is_source and inputs:
        raise FragmentError(f"{kind.name} is a source and reads no inputs", ["inputs"])
    if len(inputs) < kind.min_inputs:
        raise FragmentError(
            f"{kind.name} reads {kind.reads} from at least {kind.min_inputs} input "
            "(inputs: [{task: <name>}])",
            ["inputs"],
        )
    seen: set[str] = set()
    for i, raw in enumerate(inputs):
        name = raw.get("task") if isinstance(raw, Mapping) else None
        if not isinstance(name, str) or not name:
            raise FragmentError("an input is {task: <task name>}", ["inputs", i, "task"])
        where = ("inputs", i, "task")
        if name == task:
            raise FragmentError(f"task {name!r} cannot read its own output", where)
        if name in seen:
            raise FragmentError(f"task {name!r} is listed twice", where)
        seen.add(name)
        if upstream is None:
            continue
        found = upstream(name)
        if found is None or (owner is not None and found.owner != owner):
            whose = f"{owner} owns" if owner is not None else "there is"
            raise FragmentError(f"{whose} no task named {name!r}", where)
        producer = CATALOGUE.get(found.fragment) if found.fragment is not None else None
        if producer is None and found.work:
            raise FragmentError(
                f"{kind.name} reads {kind.reads}, but task {name!r} runs its own work (its "
                "stream has its own schema); read it with a sql or python fragment",
                where,
            )
        if producer is None:
            raise FragmentError(
                f"task {name!r} runs no fragment, so it has no output stream to read", where
            )
        if producer.writes != kind.reads:
            raise FragmentError(
                f"{kind.name} reads {kind.reads}, but task {name!r} ({producer.name}) writes "
                f"{producer.writes}",
                where,
            )
