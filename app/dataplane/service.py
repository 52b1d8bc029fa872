"""Who may do what on the data plane, decided from the registry's records, and signed.

A participant asks for a token for some operations on one stream or one task and movement; the
registry answers with a token addressed to the participant whose Flight endpoint serves them,
or refuses. The rules (checked before anything is signed; nothing is written either way):

Streams. A stream is a task's output, ``<task>.out``, kept in a log at the task's owner (so the
output stays put while the task moves): that owner serves it. A source's stream is served where
the source runs (its publisher writes there), its owner's endpoint unless it was placed on a
partner (``catalogue.served_where_it_runs``).

- ``append``, ``fence``: the producing task's host, or the target of a prepared movement of it
  (it takes over the writes at the commit); the owner, which keeps the log.
- ``read``: those, the producing task's replica hosts (a standby takes its writes over at a
  failover, from where the output stands), and every party of a task that consumes the stream
  (its owner, host, replica hosts, the target of a prepared movement of it).
- ``ack`` as consumer ``Y``: ``Y`` consumes the stream and the caller runs ``Y`` or is about to
  (its host, a replica host, the target of a prepared movement of it). Nobody trims another
  consumer's position.

Tasks, for one movement of them (the prepared movement names source and target):

- ``release`` (stop the fragment and hand over its checkpoint): the movement's target, while it
  is prepared; served by the source.
- ``checkpoint`` (push a checkpoint, or discard one pushed): the movement's source or target,
  while it is prepared; served by the target.
- ``reinstate`` (run it again at the source): the target, once the movement is aborted (or
  while it is prepared, when the target aborts it next); served by the source.
- ``retire`` (forget the source's copy): the target, once the movement is committed.

Tasks, under no movement:

- ``standby`` (push or discard a passive standby's checkpoint): the task's host, served by the
  participant holding the task's replica (one holder; with several the caller cannot say which
  it means, so the registry refuses rather than guess).

A consumer's runners may also acknowledge as ``<consumer>.<purpose>`` (a warm copy's
``X.warm-7``, a standby's ``X.standby``, an upstream backup's ``X.backup``): positions they keep
for that consumer, never another's.

Replica streams. An active replica of task ``X`` on participant ``H`` (a running DPC copy,
``spark_jobs.runtime.active``) keeps its own log of ``X``'s output on its own endpoint:
``X.out@H``, with its DPC companion ``X.out@H.dpc`` (``app.dataplane.streams``). ``H`` serves
them, only while it holds a replica of ``X`` or hosts ``X`` (a failover promoted its copy:
``spark_jobs.runtime.promote``); only ``H`` appends to or fences them; whoever may
read ``X.out`` may read them (a consumer chooses which replica to read from), and its consumers
acknowledge there as on ``X.out``.

An admin gets ``read`` tokens for any stream (the operator checks outputs), nothing else.

A caller who is no party to a stream's or task's records gets 404, the answer for an unknown
name (a stranger learns nothing), a party without the right for that operation 403.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.dataplane import tokens
from app.dataplane.schemas import DataplaneKeyRead, TokenRead, TokenRequest
from app.dataplane.streams import StreamName, parse_stream
from app.errors import Forbidden, InvalidInput, NotFound
from app.models import Movement, MovementStatus, Participant, Replica, Task
from app.tasks.catalogue import served_where_it_runs


class SigningKey:
    """The service's data-plane key, read (or generated, outside production) at first use, so
    an app that never issues a token never touches the file."""

    def __init__(self, path: Path, *, create: bool) -> None:
        """``create``: generate the key when the file is missing (never in production, where
        a mistyped path must not silently give each host a key of its own)."""
        self._path, self._create = path, create
        self._key: Ed25519PrivateKey | None = None
        self._lock = threading.Lock()

    def get(self) -> Ed25519PrivateKey:
        with self._lock:
            if self._key is None:
                if not self._path.exists() and not self._create:
                    raise FileNotFoundError(
                        f"FEDLOAD_DATAPLANE_KEY_FILE {self._path} does not exist: create it "
                        "(openssl genpkey -algorithm ed25519 -out FILE) and give every worker "
                        "the same file"
                    )
                self._key = _load_or_create(self._path)
            return self._key


def _load_or_create(path: Path) -> Ed25519PrivateKey:
    if not path.exists():
        # Several workers may start at once: each writes a complete key to its own file and
        # links it into place; link() fails for all but the first, which every one then reads.
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, scratch = tempfile.mkstemp(dir=path.parent, prefix=".dataplane-key-")
        try:
            with os.fdopen(descriptor, "wb") as out:  # mkstemp makes it 0600
                out.write(tokens.private_pem(tokens.new_signing_key()))
            with contextlib.suppress(FileExistsError):
                os.link(scratch, path)
        finally:
            os.unlink(scratch)
    return tokens.load_signing_key(path)


def public_keys(key: SigningKey) -> DataplaneKeyRead:
    return DataplaneKeyRead(
        issuer=tokens.ISSUER,
        algorithm="EdDSA",
        public_keys=[tokens.public_pem(key.get().public_key())],
    )


def issue(
    session: Session,
    principal: Principal,
    ask: TokenRequest,
    key: SigningKey,
    *,
    now: datetime,
    ttl_seconds: float,
) -> TokenRead:
    grant = _grant(ask)
    me = principal.participant_id
    if me is None:
        serving = _operator_serving(session, grant)
    elif grant.stream is not None:
        serving = _stream_serving(session, me, grant)
    else:
        serving = _task_serving(session, me, grant)
    claims = tokens.claims_for(principal.name, serving, grant, now=now.timestamp(), ttl=ttl_seconds)
    return TokenRead(
        token=tokens.sign(claims, key.get()),
        serving=serving,
        expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
    )


def _grant(ask: TokenRequest) -> tokens.Grant:
    operations = frozenset(ask.operations)
    if (ask.stream is None) == (ask.task is None):
        raise InvalidInput("name exactly one of stream or task", field="stream")
    if ask.stream is not None and not operations <= tokens.STREAM_OPERATIONS:
        raise InvalidInput(
            f"a stream's operations are {sorted(tokens.STREAM_OPERATIONS)}", field="operations"
        )
    if ask.task is not None:
        if not operations <= tokens.TASK_OPERATIONS:
            raise InvalidInput(
                f"a task's operations are {sorted(tokens.TASK_OPERATIONS)}", field="operations"
            )
        if operations == {tokens.STANDBY}:
            if ask.movement is not None:
                raise InvalidInput("standby is for no movement", field="movement")
        elif tokens.STANDBY in operations:
            raise InvalidInput("ask for standby apart from other operations", field="operations")
        elif ask.movement is None:
            raise InvalidInput("a task's operations are for one movement of it", field="movement")
    if (tokens.ACK in operations) != (ask.consumer is not None):
        raise InvalidInput("consumer goes with ack, and only with ack", field="consumer")
    return tokens.Grant(
        operations=operations,
        stream=ask.stream,
        task=ask.task,
        movement=ask.movement,
        consumer=ask.consumer,
    )


def _operator_serving(session: Session, grant: tokens.Grant) -> str:
    """An admin may read any stream (the operator checks outputs) and do nothing else there:
    the data plane's writes, trims, fences and moves are the participants'."""
    if grant.stream is None or grant.operations != {tokens.READ}:
        raise Forbidden(
            "an admin key gets read tokens for streams only: the data plane's other "
            "operations are between the participants the records name",
            field="operations",
        )
    named = parse_stream(grant.stream)
    producer = None if named is None else _task_named(session, named.task)
    if named is None or producer is None:
        raise NotFound(f"no stream {grant.stream!r}", field="stream")
    if named.holder is not None:
        return _replica_holder(session, producer, named, grant.stream)
    return _name(session, _served_at(producer))


def _task_named(session: Session, name: str) -> Task | None:
    return session.scalar(select(Task).where(Task.name == name))


def _replica_holder(session: Session, task: Task, named: StreamName, stream: str) -> str:
    """The participant that serves a replica stream: its holder, while it holds a replica or,
    after a failover promoted its copy, while it hosts the task (the copy runs on as the host
    and still writes its own log, which it forwards into the task's: ``runtime.promote``)."""
    holder = session.scalar(select(Participant).where(Participant.name == named.holder))
    holds = holder is not None and (
        holder.id == task.host_id
        or session.scalar(
            select(Replica.id).where(
                Replica.task_id == task.id, Replica.participant_id == holder.id
            )
        )
        is not None
    )
    if not holds:
        raise NotFound(
            f"no stream {stream!r}: {named.holder} holds no replica of {task.name}",
            field="stream",
        )
    return named.holder or ""


def _name(session: Session, participant_id: int) -> str:
    name = session.scalar(select(Participant.name).where(Participant.id == participant_id))
    assert name is not None
    return name


def _prepared_targets(session: Session, task_id: int) -> set[int]:
    return set(
        session.scalars(
            select(Movement.to_id).where(
                Movement.task_id == task_id, Movement.status == MovementStatus.prepared
            )
        )
    )


def _runners(session: Session, task: Task) -> set[int]:
    """Who runs the task or is about to: its host, replica hosts, a prepared move's target."""
    replicas = session.scalars(select(Replica.participant_id).where(Replica.task_id == task.id))
    return {task.host_id, *replicas, *_prepared_targets(session, task.id)}


def _stream_serving(session: Session, me: int, grant: tokens.Grant) -> str:
    assert grant.stream is not None
    unknown = NotFound(f"no stream {grant.stream!r} of a task you take part in", field="stream")
    named = parse_stream(grant.stream)
    if named is None:
        raise unknown
    producer = _task_named(session, named.task)
    if producer is None:
        raise unknown
    writers = {producer.owner_id, producer.host_id, *_prepared_targets(session, producer.id)}
    # Only the producer's owner's fragments can read it (catalogue.validate_fragment: an input
    # is another task of the same owner), so the owner index narrows the search to those
    # instead of every task in the registry; the JSON inputs are read for them alone. A reader
    # runs a catalogue fragment or its own work: any task but a synthetic one.
    candidates = select(Task).where(
        Task.owner_id == producer.owner_id, Task.id != producer.id, Task.synthetic.is_(False)
    )
    consumers = [
        task for task in session.scalars(candidates) if producer.name in _input_names(task)
    ]
    readers = set(writers) | _runners(session, producer)
    for task in consumers:
        readers |= {task.owner_id, *_runners(session, task)}
    if me not in readers:
        raise unknown
    serving: str | None = None
    if named.holder is not None:
        # A replica's own log: read as the task's output is, written and served by its holder
        # (asked only once the caller is a party: a stranger learns nothing of replicas).
        serving = _replica_holder(session, producer, named, grant.stream)
        writers = {session.scalar(select(Participant.id).where(Participant.name == serving)) or -1}
    refused = []
    if grant.operations & {tokens.APPEND, tokens.FENCE} and me not in writers:
        refused.append(
            "append to or fence it (only its producer's host and owner do; a replica's log, "
            "only its holder)"
        )
    if tokens.ACK in grant.operations:
        consumer = _consumer_acked_as(consumers, grant.consumer)
        if consumer is None or me not in _runners(session, consumer):
            refused.append(
                f"acknowledge it as {grant.consumer!r} (only a consumer's host acknowledges, "
                "as that consumer)"
            )
    if refused:
        raise Forbidden(f"you may not {' or '.join(refused)}: {grant.stream}", field="operations")
    return serving if serving is not None else _name(session, _served_at(producer))


def _served_at(producer: Task) -> int:
    """Who serves a task's stream: its owner (the log stays put while the task moves), or for
    a source, whoever runs it (its publisher writes there; a partner, when placed there)."""
    return producer.host_id if served_where_it_runs(producer.fragment) else producer.owner_id


def _consumer_acked_as(consumers: list[Task], name: str | None) -> Task | None:
    """The consuming task that ``name`` acknowledges for: itself, or one of its runners'
    positions ``<task>.<purpose>`` (task names hold dots too, so the longest name wins)."""
    if name is None:
        return None
    matching = [t for t in consumers if name == t.name or name.startswith(f"{t.name}.")]
    return max(matching, key=lambda t: len(t.name), default=None)


def _input_names(task: Task) -> set[str]:
    # A task's inputs are the tasks whose output streams it reads (TaskRecord.from_read).
    return {str(i.get("task")) if isinstance(i, dict) else str(i) for i in (task.inputs or [])}


def _standby_serving(session: Session, me: int, grant: tokens.Grant) -> str:
    task = session.scalar(select(Task).where(Task.name == grant.task))
    if task is None or me not in _runners(session, task):
        raise NotFound(f"no task {grant.task!r} that you run", field="task")
    if me != task.host_id:
        raise Forbidden(f"{grant.task}: only its host ships standbys of it", field="operations")
    holders = sorted(
        set(session.scalars(select(Replica.participant_id).where(Replica.task_id == task.id)))
    )
    if len(holders) != 1:
        raise Forbidden(
            f"{grant.task} has {len(holders)} replica holders: a standby token is for the one "
            "holder of a task's replica",
            field="task",
        )
    return _name(session, holders[0])


def _task_serving(session: Session, me: int, grant: tokens.Grant) -> str:
    assert grant.task is not None
    if grant.operations == {tokens.STANDBY}:
        return _standby_serving(session, me, grant)
    assert grant.movement is not None
    found = session.execute(
        select(Movement, Task)
        .join(Task, Task.id == Movement.task_id)
        .where(Movement.id == grant.movement, Task.name == grant.task)
    ).first()
    unknown = NotFound(
        f"no movement {grant.movement} of task {grant.task!r} that you are a party to",
        field="movement",
    )
    if found is None:
        raise unknown
    movement, _ = found
    if me not in (movement.from_id, movement.to_id):
        raise unknown
    status = movement.status
    rules = {
        # operation: (who may, in which states, who serves)
        tokens.RELEASE: ({movement.to_id}, {MovementStatus.prepared}, movement.from_id),
        tokens.CHECKPOINT: (
            {movement.from_id, movement.to_id},
            {MovementStatus.prepared},
            movement.to_id,
        ),
        tokens.REINSTATE: (
            {movement.to_id},
            {MovementStatus.prepared, MovementStatus.aborted},
            movement.from_id,
        ),
        tokens.RETIRE: ({movement.to_id}, {MovementStatus.committed}, movement.from_id),
    }
    serving = {rules[op][2] for op in grant.operations}
    if len(serving) > 1:
        raise InvalidInput(
            "these operations are served by different participants: ask for each apart",
            field="operations",
        )
    for op in sorted(grant.operations):
        who, states, _ = rules[op]
        if me not in who:
            raise Forbidden(
                f"movement {movement.id}: {op} is not yours to ask for (as its "
                f"{'source' if me == movement.from_id else 'target'})",
                field="operations",
            )
        if status not in states:
            raise Forbidden(
                f"movement {movement.id} is {status.value}: {op} only while it is "
                + " or ".join(sorted(s.value for s in states)),
                field="operations",
            )
    return _name(session, serving.pop())
