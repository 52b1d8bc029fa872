"""Federation documents: participants, contracts, tasks and a timeline, as frozen dataclasses.

A document is checked in three layers, each error naming the file, the line and the field:
the YAML syntax, the JSON Schema in ``contracts/federation.schema.json``, and the cross-references
and cost-model checks that a schema cannot express.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from app.limits import (
    MAX_JSON_OBJECT_BYTES,
    MAX_NAME_CHARS,
    control_character,
    json_problem,
    utc_range_problem,
)
from app.market.cost_models import CostModelError, build_cost_model
from app.resources import federation_schema_path
from app.tasks.catalogue import Upstream
from app.tasks.definition import TaskDefinition, define_task, installed_distributions
from app.tasks.naming import naming_error
from app.work.errors import FragmentError

SCHEMA_PATH = federation_schema_path()  # in the checkout or inside the installed package
# Contracts from a file with no explicit term run for a year from the moment they are applied.
DEFAULT_TERM = timedelta(days=365)

Path_ = tuple[str | int, ...]

# A federation file is a few kB; these bounds refuse, before anything is built, a file that
# would make the loader or the registry hold megabytes: a big file, or a small one whose YAML
# aliases expand to a huge document (a 414-byte file of nested aliases made a 5.8 MB profile).
MAX_FILE_CHARS = 1024 * 1024
MAX_EXPANDED_NODES = 100_000


class FederationFileError(ValueError):
    """A document that cannot be used. ``str()`` reads ``file:line: field: what is wrong``."""

    def __init__(self, source: str, line: int | None, field: str, detail: str) -> None:
        self.source, self.line, self.field, self.detail = source, line, field, detail
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {field}: {detail}")


@dataclass(frozen=True)
class ParticipantSpec:
    name: str
    capacity: float
    cost_model: Mapping[str, Any]
    joins_at: float | None = None
    profile: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AvailabilitySpec:
    recovery: str | None = None
    max_delay_seconds: float | None = None
    replica_hosting: bool = False


@dataclass(frozen=True)
class ContractSpec:
    a: str
    b: str
    price_min: float
    price_max: float
    min_move_seconds: float = 0.0
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    availability: AvailabilitySpec | None = None

    def pair(self) -> frozenset[str]:
        return frozenset((self.a, self.b))


@dataclass(frozen=True)
class TaskSpec:
    name: str
    owner: str
    load: float
    host: str | None = None
    # What runs (a kind of app.tasks.catalogue), its parameters with the defaults filled in,
    # and the names of the tasks whose output it reads. No fragment: a declared load only.
    fragment: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    replicas: int = 0
    # Or the owner's own work (app.work.spec.Work.to_json) and the schema of its output
    # stream; synthetic: runs nothing (neither a fragment nor work), its load is declared.
    work: Mapping[str, Any] = field(default_factory=dict)
    synthetic: bool = False
    output_schema: str | None = None

    @property
    def initial_host(self) -> str:
        return self.host or self.owner


@dataclass(frozen=True)
class TimelineEvent:
    at: float
    event: str  # scale_load | task_load | join | leave
    participant: str | None = None
    task: str | None = None
    factor: float | None = None
    load: float | None = None
    note: str | None = None


@dataclass(frozen=True)
class SimulationSpec:
    # Borealis's constants: statistics every 1 s, offers examined every 7 s.
    step_seconds: float = 1.0
    offer_interval_seconds: float = 7.0
    duration_seconds: float = 600.0
    hysteresis: float = 0.01


@dataclass(frozen=True)
class FederationDoc:
    name: str
    description: str
    participants: tuple[ParticipantSpec, ...]
    contracts: tuple[ContractSpec, ...]
    tasks: tuple[TaskSpec, ...]
    timeline: tuple[TimelineEvent, ...]
    simulation: SimulationSpec
    source: str = "<memory>"

    def participant(self, name: str) -> ParticipantSpec:
        for p in self.participants:
            if p.name == name:
                return p
        raise KeyError(name)


@lru_cache(maxsize=1)
def federation_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def _line_index(node: yaml.Node, path: Path_, index: dict[Path_, int]) -> None:
    index[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            index[(*path, key)] = key_node.start_mark.line + 1
            _line_index(value_node, (*path, key), index)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_index(item, (*path, i), index)


def _field_name(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


class _Locator:
    def __init__(self, source: str, lines: dict[Path_, int]) -> None:
        self.source, self.lines = source, lines

    def error(self, path: Sequence[str | int], detail: str) -> FederationFileError:
        probe: Path_ = tuple(path)
        while probe not in self.lines and probe:
            probe = probe[:-1]
        return FederationFileError(self.source, self.lines.get(probe), _field_name(path), detail)


def load_federation(path: str | Path, *, check_paths: bool = False) -> FederationDoc:
    """``check_paths``: the file is applied on the host whose disk its ``files`` sources
    read (``fedload contracts apply``, on the operator's host): their directories must exist.
    Elsewhere (a simulation, a test) the paths are only text."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FederationFileError(
            str(path), None, "(file)", f"cannot read: {exc.strerror}"
        ) from exc
    return parse_federation(text, source=str(path), check_paths=check_paths)


def _expanded_nodes(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes the document has once every alias is expanded, computed on the composed
    graph (an alias is the same node object again), so a bomb is counted without expanding."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_EXPANDED_NODES + 1  # a cycle counts as too many
    total = 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            total += _expanded_nodes(key_node, sizes) + _expanded_nodes(value_node, sizes)
            if total > MAX_EXPANDED_NODES:
                break
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            total += _expanded_nodes(item, sizes)
            if total > MAX_EXPANDED_NODES:
                break
    sizes[id(node)] = total
    return total


def parse_federation(
    text: str, *, source: str = "<memory>", check_paths: bool = False
) -> FederationDoc:
    if len(text) > MAX_FILE_CHARS:
        raise FederationFileError(
            source, None, "(file)", f"is {len(text)} characters; at most {MAX_FILE_CHARS} allowed"
        )
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and _expanded_nodes(node, {}) > MAX_EXPANDED_NODES:
            raise FederationFileError(
                source,
                None,
                "(document)",
                f"expands (through its YAML aliases) to more than {MAX_EXPANDED_NODES} values; "
                "write the values out or drop the aliases",
            )
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise FederationFileError(source, line, "(syntax)", f"invalid YAML: {problem}") from exc
    lines: dict[Path_, int] = {}
    if node is not None:
        _line_index(node, (), lines)
    where = _Locator(source, lines)
    if not isinstance(data, dict):
        raise where.error((), "a federation document must be a mapping at the top level")
    _check_values(data, where)
    _check_schema(data, where)
    return _build(data, where, source, check_paths)


def _split_path(dotted: str) -> list[str | int]:
    path: list[str | int] = []
    for part in dotted.replace("]", "").replace("[", ".").split("."):
        if part:
            path.append(int(part) if part.isdigit() else part)
    return path


def _check_values(data: dict[str, Any], where: _Locator) -> None:
    """Values no backend can store, anywhere in the document: ``.nan``, ``.inf`` or 1e309, a
    NUL (YAML's ``"\\0"``), deep nesting; and control characters in any name."""
    found = json_problem(data)
    if found is not None:
        dotted, what = found
        raise where.error(_split_path(dotted), what)
    stored = [
        ("participants", "profile"),
        ("participants", "cost_model"),
        ("tasks", "params"),
        ("tasks", "source"),
        ("tasks", "sink"),
    ]
    for section, key in stored:
        for i, raw in enumerate(data.get(section) or []):
            value = raw.get(key) if isinstance(raw, dict) else None
            size = len(json.dumps(value, separators=(",", ":"))) if value is not None else 0
            if size > MAX_JSON_OBJECT_BYTES:
                raise where.error(
                    [section, i, key],
                    f"is {size} bytes as JSON; at most {MAX_JSON_OBJECT_BYTES} are allowed",
                )
    named = [("participants", "name"), ("tasks", "name"), ("tasks", "owner"), ("tasks", "host")]
    for section, key in named:
        for i, raw in enumerate(data.get(section) or []):
            value = raw.get(key) if isinstance(raw, dict) else None
            if not isinstance(value, str):
                continue
            if len(value) > MAX_NAME_CHARS:
                raise where.error([section, i, key], f"is longer than {MAX_NAME_CHARS} characters")
            problem = control_character(value)
            if problem is not None:
                raise where.error([section, i, key], f"must not contain a {problem}")


def _check_schema(data: dict[str, Any], where: _Locator) -> None:
    validator = jsonschema.Draft202012Validator(
        federation_schema(), format_checker=jsonschema.FormatChecker()
    )
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), e.message))
    if errors:
        # The shallowest error is usually the real one; deeper ones follow from it.
        err = errors[0]
        path: list[str | int] = list(err.absolute_path)
        # Name the key itself, not the mapping around it, for missing and unexpected keys.
        if err.validator == "required" and isinstance(err.instance, dict):
            missing = [k for k in err.validator_value if k not in err.instance]
            path += missing[:1]
        elif err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            path += [k for k in err.instance if k not in allowed][:1]
        raise where.error(path, err.message)


def _parse_time(value: str | None, where: _Locator, path: list[str | int]) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise where.error(path, f"not an ISO 8601 time: {exc}") from exc
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    problem = utc_range_problem(parsed)
    if problem is not None:
        raise where.error(path, problem)
    return parsed


def _build(
    data: dict[str, Any], where: _Locator, source: str, check_paths: bool = False
) -> FederationDoc:
    participants: list[ParticipantSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["participants"]):
        name = raw["name"]
        if name in seen:
            raise where.error(["participants", i, "name"], f"participant {name!r} is listed twice")
        seen.add(name)
        spec = raw.get("cost_model", {"kind": "mm1"})
        try:
            build_cost_model(spec, float(raw["capacity"]))
        except CostModelError as exc:
            sub = (exc.field or "cost_model").replace("cost_model", "", 1).lstrip(".")
            path: list[str | int] = ["participants", i, "cost_model"]
            for part in sub.replace("]", "").replace("[", ".").split("."):
                if part:
                    path.append(int(part) if part.isdigit() else part)
            raise where.error(path, exc.detail) from exc
        participants.append(
            ParticipantSpec(
                name=name,
                capacity=float(raw["capacity"]),
                cost_model=spec,
                joins_at=raw.get("joins_at"),
                profile=raw.get("profile", {}),
            )
        )

    def known(name: str, path: list[str | int]) -> str:
        if name not in seen:
            raise where.error(path, f"unknown participant {name!r}")
        return name

    contracts: list[ContractSpec] = []
    pairs: set[frozenset[str]] = set()
    for i, raw in enumerate(data.get("contracts", [])):
        a = known(raw["between"][0], ["contracts", i, "between", 0])
        b = known(raw["between"][1], ["contracts", i, "between", 1])
        if a == b:
            raise where.error(
                ["contracts", i, "between"], f"a contract needs two parties, got {a!r} twice"
            )
        if frozenset((a, b)) in pairs:
            raise where.error(["contracts", i, "between"], f"{a} and {b} already have a contract")
        pairs.add(frozenset((a, b)))
        if raw["price_min"] > raw["price_max"]:
            raise where.error(
                ["contracts", i, "price_max"],
                f"price_max {raw['price_max']} is below price_min {raw['price_min']}",
            )
        starts = _parse_time(raw.get("starts_at"), where, ["contracts", i, "starts_at"])
        ends = _parse_time(raw.get("ends_at"), where, ["contracts", i, "ends_at"])
        if starts and ends and ends <= starts:
            raise where.error(["contracts", i, "ends_at"], "ends_at must be after starts_at")
        avail = raw.get("availability")
        contracts.append(
            ContractSpec(
                a=a,
                b=b,
                price_min=float(raw["price_min"]),
                price_max=float(raw["price_max"]),
                min_move_seconds=float(raw.get("min_move_seconds", 0.0)),
                starts_at=starts,
                ends_at=ends,
                availability=AvailabilitySpec(**avail) if avail is not None else None,
            )
        )

    raw_tasks: list[dict[str, Any]] = data.get("tasks", [])
    by_task: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(raw_tasks):
        if raw["name"] in by_task:
            raise where.error(["tasks", i, "name"], f"task {raw['name']!r} is listed twice")
        by_task[raw["name"]] = raw
        known(raw["owner"], ["tasks", i, "owner"])
        wrong = naming_error(str(raw["name"]), str(raw["owner"]))
        if wrong is not None:
            raise where.error(["tasks", i, "name"], wrong)
        if "host" in raw:
            known(raw["host"], ["tasks", i, "host"])
    task_names = set(by_task)
    tasks = _tasks(raw_tasks, where, check_paths)

    needs = {
        "scale_load": ("participant", "factor"),
        "task_load": ("task", "load"),
        "join": ("participant",),
        "leave": ("participant",),
    }
    timeline: list[TimelineEvent] = []
    for i, raw in enumerate(data.get("timeline", [])):
        for key in needs[raw["event"]]:
            if key not in raw:
                raise where.error(["timeline", i], f"a {raw['event']} event needs '{key}'")
        if "participant" in raw:
            known(raw["participant"], ["timeline", i, "participant"])
        if "task" in raw and raw["task"] not in task_names:
            raise where.error(["timeline", i, "task"], f"unknown task {raw['task']!r}")
        timeline.append(TimelineEvent(**raw))
    timeline.sort(key=lambda e: e.at)

    return FederationDoc(
        name=data["federation"],
        description=data.get("description", ""),
        participants=tuple(participants),
        contracts=tuple(contracts),
        tasks=tuple(tasks),
        timeline=tuple(timeline),
        simulation=SimulationSpec(**data.get("simulation", {})),
        source=source,
    )


def _tasks(raw_tasks: list[dict[str, Any]], where: _Locator, check_paths: bool) -> list[TaskSpec]:
    """Each task checked by the registry's own rule (app.tasks.definition). Inputs name tasks
    of this document, earlier or later in it: a task's inputs are defined before it (their
    output schemas are what its SQL is checked against), and a cycle is an error."""
    index = {raw["name"]: i for i, raw in enumerate(raw_tasks)}
    defined: dict[str, TaskDefinition] = {}
    visiting: set[str] = set()
    distributions: dict[str, str] | None = None

    def upstream(name: str) -> Upstream | None:
        if name not in index:
            return None
        if name in visiting:
            raise FragmentError(f"task {name!r} reads its own output through its inputs", ())
        found = define(index[name])
        raw = raw_tasks[index[name]]
        return Upstream(name, raw["owner"], found.fragment, found.work.to_json(), found.output_ddl)

    def define(i: int) -> TaskDefinition:
        nonlocal distributions
        raw = raw_tasks[i]
        if raw["name"] in defined:
            return defined[raw["name"]]
        if raw.get("python") is not None and distributions is None:
            distributions = installed_distributions()
        visiting.add(raw["name"])
        try:
            found = define_task(
                raw,
                name=raw["name"],
                owner=raw["owner"],
                upstream=upstream,
                distributions=distributions,
                check_paths=check_paths,
            )
        except FragmentError as exc:
            raise where.error(["tasks", i, *exc.path], exc.detail) from exc
        finally:
            visiting.discard(raw["name"])
        defined[raw["name"]] = found
        return found

    specs: list[TaskSpec] = []
    for i, raw in enumerate(raw_tasks):
        found = define(i)
        specs.append(
            TaskSpec(
                name=raw["name"],
                owner=raw["owner"],
                load=found.load,
                host=raw.get("host"),
                fragment=found.fragment,
                params=dict(found.params),
                inputs=found.inputs,
                replicas=int(raw.get("replicas", 0)),
                work=found.work.to_json(),
                synthetic=found.synthetic,
                output_schema=found.output_ddl,
            )
        )
    return specs


def contract_term(spec: ContractSpec, now: datetime) -> tuple[datetime, datetime]:
    """The term a file contract gets in the registry: its own, else a year from ``now``."""
    starts = spec.starts_at or now
    return starts, spec.ends_at or starts + DEFAULT_TERM
