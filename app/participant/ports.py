"""What a participant node needs from the world, as typed ports.

The node (``app.participant.node``) decides; these ports act. ``Host`` runs the fragments the
registry assigns to this participant (the Spark adapter lives in ``spark_jobs.runtime``; a task
without a fragment is declared load and needs no host at all), ``Mover`` brings a task over when
this participant accepted it. The registry is reached through ``FedloadClient`` (REST) or any
object with the same methods. Records here are plain frozen dataclasses built from the service's
read schemas, so adapters never depend on the wire format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# Catalogue fragments that produce a stream rather than process one: they run where their owner
# is (the data comes from there) and are never offered.
SOURCE_FRAGMENTS = frozenset({"generator"})


@dataclass(frozen=True)
class TaskRecord:
    """The registry's record of one task this participant owns or hosts."""

    name: str
    owner: str
    host: str
    load: float
    lease_epoch: int = 0
    pinned: bool = False
    fragment: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()  # names of the tasks whose output streams it reads
    # The catalogue fragment of each input (what its stream carries), in the order of inputs.
    input_fragments: tuple[str | None, ...] = ()
    # Who serves each input's stream (TaskInputRead.served_by; None: its owner, as before).
    input_served_by: tuple[str | None, ...] = ()
    # Per input, who runs an active replica of its task (TaskInputRead.active_copies): their
    # own logs of the stream are alternates to read it from.
    input_copies: tuple[tuple[str, ...], ...] = ()
    # What it runs when it is the participant's own work (``app.work.spec.Work.to_json``:
    # source, sql, python, watermark, schema, sink); empty for a catalogue fragment or a
    # synthetic task.
    work: Mapping[str, Any] = field(default_factory=dict)
    # A declared load, nothing runs (TaskRead.synthetic).
    synthetic: bool = False
    # The columns its output stream carries, as Spark DDL (TaskRead.output_schema), and the
    # event-time column of that stream (a source's declared one; a fragment's is stime).
    output_schema: str | None = None
    # Per input, the columns of its stream (TaskInputRead.schema) and its event-time column.
    input_schemas: tuple[str | None, ...] = ()
    input_event_times: tuple[str | None, ...] = ()

    @property
    def real(self) -> bool:
        """Runs as a fragment or a source (a Spark query, a publisher), not declared load only."""
        return self.fragment is not None or bool(self.work)

    @property
    def source(self) -> bool:
        return self.fragment in SOURCE_FRAGMENTS or "source" in self.work

    @property
    def output_stream(self) -> str:
        """Where its output goes: a log at its owner, so the output stays put while it moves."""
        return f"{self.name}.out"

    @classmethod
    def from_read(cls, row: Mapping[str, Any]) -> TaskRecord:
        raw = [i if isinstance(i, Mapping) else {"task": i} for i in row.get("inputs") or ()]
        return cls(
            name=str(row["name"]),
            owner=str(row["owner"]),
            host=str(row["host"]),
            load=float(row["load"]),
            lease_epoch=int(row.get("lease_epoch", 0)),
            pinned=bool(row.get("pinned", False)),
            fragment=row.get("fragment"),
            params=dict(row.get("params") or {}),
            inputs=tuple(str(i["task"]) for i in raw),
            input_fragments=tuple(i.get("fragment") for i in raw),
            input_served_by=tuple(i.get("served_by") for i in raw),
            input_copies=tuple(tuple(i.get("active_copies") or ()) for i in raw),
            work=dict(row.get("work") or {}),
            synthetic=bool(row.get("synthetic", False)),
            output_schema=row.get("output_schema"),
            input_schemas=tuple(i.get("schema") for i in raw),
            input_event_times=tuple(i.get("event_time") for i in raw),
        )


@dataclass(frozen=True)
class MovementRecord:
    """A prepared movement as the registry created it (``GET /v1/movements/{id}``)."""

    id: int
    task: str
    source: str
    target: str
    epoch: int
    reason: str
    status: str
    price: float | None = None
    replica: bool = False
    # Seconds left, when read, before the registry aborts the prepared movement (None: not
    # said); a mover plans what it may spend before committing from this.
    lease_seconds_left: float | None = None

    @classmethod
    def from_read(cls, row: Mapping[str, Any]) -> MovementRecord:
        return cls(
            id=int(row["id"]),
            task=str(row["task"]),
            source=str(row["from"]),
            target=str(row["to"]),
            epoch=int(row["epoch"]),
            reason=str(row["reason"]),
            status=str(row["status"]),
            price=None if row.get("price") is None else float(row["price"]),
            replica=bool(row.get("replica", False)),
            lease_seconds_left=(
                None if row.get("lease_seconds_left") is None else float(row["lease_seconds_left"])
            ),
        )


@dataclass(frozen=True)
class Received:
    """What a move brought: bytes of state shipped (0 for declared load) and phase timings."""

    state_bytes: int = 0
    timings: Mapping[str, float] = field(default_factory=dict)


class Registry(Protocol):
    """The registry as a participant reaches it: ``FedloadClient`` over REST, or an in-memory
    stand-in in unit tests. Rows are the service's read schemas as JSON objects."""

    def heartbeat(self, **report: Any) -> dict[str, Any]: ...

    def contracts(self, status: str | None = None) -> list[dict[str, Any]]: ...

    def tasks(self) -> list[dict[str, Any]]: ...

    def task(self, name: str) -> dict[str, Any]: ...

    def replicas(self) -> list[dict[str, Any]]: ...

    def offers(self, status: str | None = None) -> list[dict[str, Any]]: ...

    def offer(
        self,
        contract_id: int,
        tasks: list[str],
        price: float,
        loads: dict[str, float] | None = None,
        relay_for: int | None = None,
        replicas: list[str] | None = None,
        reservation_price: float | None = None,
    ) -> dict[str, Any]: ...

    def accept(
        self,
        offer_id: int,
        version: int,
        tasks: list[str] | None = None,
        replicas: list[str] | None = None,
        reservation_price: float | None = None,
    ) -> dict[str, Any]: ...

    def reject(self, offer_id: int, version: int) -> dict[str, Any]: ...

    def movement(self, movement_id: int) -> dict[str, Any]: ...


class Host(Protocol):
    @property
    def endpoint(self) -> str | None:
        """This participant's data-plane address (reported in heartbeats), None if it has none."""
        ...

    def reconcile(self, tasks: Sequence[TaskRecord]) -> None:
        """Bring what runs here in line with the registry: run every real task this participant
        hosts, serve the output logs of the ones it owns, drop copies of tasks that moved away
        (never one that is in the middle of a move)."""
        ...

    def loads(self, tasks: Sequence[TaskRecord]) -> dict[str, float]:
        """Load units of each task hosted here: measured for running fragments, declared
        otherwise."""
        ...

    def close(self) -> None:
        """Stop every fragment after its last committed batch; the registry still names this
        participant their host, so they resume from their checkpoints at the next start."""
        ...


class Mover(Protocol):
    def receive(self, movement: MovementRecord) -> Received:
        """Bring the task over from ``movement.source`` and commit the movement as its new host
        (or abort it and raise, leaving the source the host)."""
        ...

    def receive_replica(self, movement: MovementRecord) -> Received:
        """Take over the replica the source hosts (its standby, where one runs) and commit the
        replica's movement; abort it if the standby cannot follow."""
        ...


class NoHost:
    """A participant that runs no fragments: every task it holds is declared load."""

    endpoint: str | None = None

    def reconcile(self, tasks: Sequence[TaskRecord]) -> None:
        return None

    def loads(self, tasks: Sequence[TaskRecord]) -> dict[str, float]:
        return {t.name: t.load for t in tasks}

    def close(self) -> None:
        return None
