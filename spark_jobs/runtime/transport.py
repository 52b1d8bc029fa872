"""Streams and checkpoints over Arrow Flight.

Every host runs one ``StreamServer``. It holds the output logs of the streams the host produces
(upstream backup: a bucket stays until every consumer has acknowledged it) and receives the
checkpoints shipped to it when a fragment moves in. Participants share no file system, so this is
the only way data crosses between them, also when both ends happen to be in one process.

Wire protocol (all JSON in tickets, descriptors and action bodies):

- DoGet ``{"op": "read", "stream", "lo", "hi"}``: the rows of buckets [lo, hi), in bucket order.
- DoPut ``{"op": "append", "stream", "boundary"?, "batch_id"?, "epoch"?}``: append rows (bucketed
  by their ``stime``); with ``batch_id`` the write is deduplicated (a re-run micro-batch is kept
  once) and fenced (refused when ``epoch`` is below the stream's fence).
- DoPut ``{"op": "checkpoint", "fragment", "movement", "sha256", "size"}``: a packed checkpoint
  in 1 MiB binary chunks; refused unless size and checksum match.
- DoPut ``{"op": "checkpoint_delta", ...}``, the same fields: a ``TreeDelta`` (files added or
  changed, names removed) applied to the checkpoint this host already holds for that fragment and
  movement; refused unless that copy is the one the delta was computed against and the result is
  the sender's tree (see ``checkpoint_tree``).
- Actions ``declare``, ``info``, ``ack``, ``fence``, ``advance`` (a BOUNDARY, fenced by epoch).
- Host actions, answered by the host's runtime (``HostHandler``): ``release`` (stop a fragment
  after its last commit and pack its checkpoint, then DoGet ``{"op": "checkpoint"}`` pulls it),
  ``reinstate`` (run it again after an aborted move), ``retire`` (forget it after a commit).
- Further actions a module registers by name in ``StreamServer.actions``: the warm hand-off's
  ``warm`` (stage a live snapshot of a running fragment for a prepared movement, pulled like a
  release's) and ``offsets`` (a fragment's offset log), see ``spark_jobs.runtime.warm``.

Authentication (issue 14, item 5). A server built with ``auth`` (every agent's) refuses a call
without a genuine, current token addressed to it before any handler runs, and every request must
be covered by the token: ``SCOPES`` maps each request ("get:read", "put:append",
"action:release", ...) to the ``Requirement`` it needs, and a guard applied to ``do_get``,
``do_put`` and ``do_action`` of this class *and of every subclass* checks it first. A request
with no entry is refused (deny by default): a new action declares its scope by adding one entry
to its class's ``SCOPES``, e.g. ``SCOPES = {**StreamServer.SCOPES, "action:promote":
lambda body: Requirement.of(CHECKPOINT, task=body["fragment"])}``. Refusals change nothing and
say why: gRPC UNAUTHENTICATED (no token, forged, expired, for another server) or
PERMISSION_DENIED (another stream, task, movement, consumer or operation), both starting
"data-plane token refused". Clients send a token per call (``StreamClient`` asks its token
source for the call's ``Grant``). With ``tls`` the endpoint is ``grpc+tls://``.

Size: past 600 lines because the log (``StreamLog``), its Flight server and its client speak one
wire protocol: every action the server answers has its client call and its grant here, so a change
to one is seen beside the others. The seam for a split is the in-memory log, which has no Flight in
it and could be a module of its own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import pyarrow as pa
import pyarrow.flight as flight

from app.dataplane.tokens import (
    ACK,
    APPEND,
    CHECKPOINT,
    FENCE,
    READ,
    REINSTATE,
    RELEASE,
    RETIRE,
    STANDBY,
    Grant,
    Requirement,
)
from spark_jobs.generators.connections import split_buckets
from spark_jobs.runtime.checkpoint_tree import (
    DeltaMismatch,
    TreeDelta,
    apply,
    pack_tree,
    unpack_tree,
)
from spark_jobs.runtime.dataplane import (
    REFUSED,
    FlightAuth,
    TlsFiles,
    TokenSource,
    call_headers,
    client_defaults,
)

CHUNK_BYTES = 1 << 20
# A consumer position below every bucket: a consumer held there keeps the whole log.
# The movement id a passive standby's checkpoints are shipped under (no movement of the
# registry's: they are pushed while the host runs; spark_jobs.runtime.standby).
STANDBY_SHIPMENT = 0
HOLD_ALL = -(2**62)


class FencedError(RuntimeError):
    """A write carried a lease epoch older than the stream's fence: the writer is a stale host."""


class TransferError(RuntimeError):
    """A checkpoint transfer was refused (size or checksum mismatch, unknown movement)."""


class BucketWidthMismatch(ValueError):
    """A log declared, or read, at a bucket width other than its own."""

    @classmethod
    def of(cls, log: str, width_us: int, other: str) -> BucketWidthMismatch:
        """``log`` is ``width_us`` wide and ``other`` says what was asked of it instead."""
        return cls(
            f"{log} has buckets of {width_us / 1e6:g} s, {other}: every agent of a federation "
            "must run with the same --bucket-seconds"
        )


class AccessRefused(PermissionError):
    """The serving endpoint refused the call's data-plane token (see the module docstring)."""


@dataclass
class _Stream:
    bucket_micros: int
    schema: pa.Schema | None = None
    buckets: dict[int, list[pa.RecordBatch]] = field(default_factory=dict)
    # Buckets below ``boundary`` are complete: the producer promised no more rows for them.
    boundary: int | None = None
    # Buckets below ``first`` were acknowledged by every consumer and dropped.
    first: int | None = None
    acks: dict[str, int] = field(default_factory=dict)
    written: set[int] = field(default_factory=set)
    fence: int = 0
    # Rows of the newest acknowledged buckets kept anyway, for readers that are no consumers
    # (``fedload tail``, an application's iterator): 0 keeps nothing past the acks.
    keep_rows: int = 0


def _newest_within(
    buckets: dict[int, list[pa.RecordBatch]], done: list[int], rows: int
) -> list[int]:
    """The newest of the ``done`` buckets (ascending) whose rows add up to at most ``rows``."""
    kept: list[int] = []
    total = 0
    for bucket in reversed(done):
        total += sum(batch.num_rows for batch in buckets[bucket])
        if total > rows:
            break
        kept.append(bucket)
    return kept[::-1]


class StreamLog:
    """The in-memory output logs of one host; thread-safe (Flight serves calls concurrently)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}

    def declare(self, stream: str, bucket_seconds: float, *, keep_rows: int = 0) -> None:
        """Create ``stream`` with buckets of ``bucket_seconds`` (again: nothing changes). A
        second declaration at another width is refused: every bucket number of the log, its
        boundary and its consumers' acknowledgements mean a width, and agents of one federation
        run with different ``--bucket-seconds`` only by mistake. ``keep_rows``: how many rows of
        the newest acknowledged buckets the log keeps for readers that are not consumers."""
        micros = round(bucket_seconds * 1_000_000)
        with self._lock:
            existing = self._streams.setdefault(stream, _Stream(micros))
            existing.keep_rows = max(existing.keep_rows, keep_rows)
            if existing.bucket_micros != micros:
                raise BucketWidthMismatch.of(
                    stream, existing.bucket_micros, f"not {bucket_seconds:g} s"
                )

    def _get(self, stream: str) -> _Stream:
        try:
            return self._streams[stream]
        except KeyError:
            raise KeyError(f"unknown stream {stream!r}") from None

    def append(
        self,
        stream: str,
        table: pa.Table,
        *,
        boundary: int | None = None,
        batch_id: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Add rows; returns False when ``batch_id`` was already written (nothing changes)."""
        with self._lock:
            s = self._get(stream)
            if epoch is not None and epoch < s.fence:
                raise FencedError(f"{stream}: epoch {epoch} is fenced (current fence {s.fence})")
            if epoch is not None:
                # The first write of a newer host fences the older ones even if nobody told us.
                s.fence = max(s.fence, epoch)
            if batch_id is not None:
                if batch_id in s.written:
                    return False
                s.written.add(batch_id)
            if s.schema is None and table.num_columns:
                s.schema = table.schema
            if table.num_rows:
                micros = table.column("stime").cast(pa.int64()).to_numpy()
                keys = micros // s.bucket_micros
                for bucket in sorted(set(keys.tolist())):
                    rows = table.filter(pa.array(keys == bucket))
                    s.buckets.setdefault(int(bucket), []).extend(rows.to_batches())
                    if s.first is None or bucket < s.first:
                        s.first = int(bucket)
            if boundary is not None:
                s.boundary = boundary if s.boundary is None else max(s.boundary, boundary)
            return True

    def read(
        self, stream: str, lo: int, hi: int, *, strict: bool = True
    ) -> tuple[pa.Schema | None, list[pa.RecordBatch]]:
        with self._lock:
            s = self._get(stream)
            floor = min(s.acks.values()) if s.acks else None
            if floor is not None and s.keep_rows and s.first is not None:
                floor = min(floor, s.first)  # acknowledged, but kept whole from ``first`` on
            if strict and floor is not None and lo < floor and lo < hi:
                # Asking for acknowledged (possibly dropped) data means a consumer lost track
                # of its offsets; an empty answer would silently lose rows, so fail loudly.
                raise KeyError(f"{stream}: buckets below {floor} were acknowledged")
            out: list[pa.RecordBatch] = []
            for bucket in sorted(b for b in s.buckets if lo <= b < hi):
                out.extend(s.buckets[bucket])
            return s.schema, out

    def info(self, stream: str) -> dict[str, Any]:
        with self._lock:
            s = self._get(stream)
            rows = sum(b.num_rows for batches in s.buckets.values() for b in batches)
            return {
                "bucket_us": s.bucket_micros,
                "boundary": s.boundary,
                "first": s.first,
                "fence": s.fence,
                "rows": rows,
                "written": sorted(s.written),
                "acks": dict(s.acks),
            }

    def ack(self, stream: str, consumer: str, bucket: int) -> None:
        """A consumer has durably processed every bucket below ``bucket``; trim what all did."""
        with self._lock:
            s = self._get(stream)
            s.acks[consumer] = max(s.acks.get(consumer, bucket), bucket)
            low = min(s.acks.values())
            done = sorted(b for b in s.buckets if b < low)
            kept = _newest_within(s.buckets, done, s.keep_rows)
            for b in done[: len(done) - len(kept)]:
                del s.buckets[b]
            if s.first is not None and s.first < low:
                # "first" is where a new consumer starts (SUnion's initialOffset): never a
                # bucket that is gone, or its first read would ask for dropped data.
                s.first = max(s.first, kept[0]) if kept else low

    def advance(
        self,
        stream: str,
        boundary: int,
        epoch: int | None = None,
        bucket_seconds: float | None = None,
    ) -> None:
        """A BOUNDARY: no more rows below bucket ``boundary``; fenced like a write. A writer
        that says the width it counted ``boundary`` in is refused at another width."""
        with self._lock:
            s = self._get(stream)
            if bucket_seconds is not None and round(bucket_seconds * 1_000_000) != s.bucket_micros:
                raise BucketWidthMismatch.of(
                    stream, s.bucket_micros, f"but its writer counts {bucket_seconds:g} s buckets"
                )
            if epoch is not None and epoch < s.fence:
                raise FencedError(f"{stream}: epoch {epoch} is fenced (current fence {s.fence})")
            s.boundary = boundary if s.boundary is None else max(s.boundary, boundary)

    def fence(self, stream: str, epoch: int) -> None:
        with self._lock:
            s = self._get(stream)
            s.fence = max(s.fence, epoch)

    def table(self, stream: str) -> pa.Table:
        """Everything retained for a stream, in bucket order (tests and reports)."""
        schema, batches = self.read(stream, -(2**62), 2**62, strict=False)
        if schema is None:
            return pa.table({})
        return pa.Table.from_batches(batches, schema=schema)


@dataclass(frozen=True)
class PackedCheckpoint:
    data: bytes
    sha256: str

    @classmethod
    def of(cls, data: bytes) -> PackedCheckpoint:
        return cls(data, hashlib.sha256(data).hexdigest())


class HostHandler(Protocol):
    """What a host's runtime does when a remote mover asks it to give up a fragment."""

    def release_for(self, fragment: str, movement: int) -> PackedCheckpoint: ...

    def reinstate(self, fragment: str, epoch: int) -> None: ...

    def retire(self, fragment: str) -> None: ...


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]


_CHUNK_SCHEMA = pa.schema([("chunk", pa.binary())])


Scope = Callable[[dict[str, Any]], Requirement]


def _stream(op: str) -> Scope:
    return lambda request: Requirement.of(op, stream=str(request["stream"]))


def _checkpoint_of(request: dict[str, Any]) -> Requirement:
    """A checkpoint pushed for a movement, or a passive standby's (``STANDBY_SHIPMENT``)."""
    if int(request["movement"]) == STANDBY_SHIPMENT:
        return Requirement.of(STANDBY, task=str(request["fragment"]))
    return Requirement.of(
        CHECKPOINT, task=str(request["fragment"]), movement=int(request["movement"])
    )


def _movement_of(op: str) -> Scope:
    return lambda request: Requirement.of(
        op, task=str(request["fragment"]), movement=int(request["movement"])
    )


def _guarded(method: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler`` preceded by the request's scope check (when the server has ``auth``)."""

    @functools.wraps(handler)
    def guarded(self: StreamServer, context: Any, request: Any, *rest: Any) -> Any:
        if self.auth is not None:
            self.authorize(context, method, request)
        return handler(self, context, request, *rest)

    guarded.__fedload_guarded__ = True  # type: ignore[attr-defined]
    return guarded


class StreamServer(flight.FlightServerBase):
    """A host's Flight endpoint: its stream logs and its inbox of shipped checkpoints."""

    # What each request needs of the caller's token (see the module docstring). The producer's
    # own progress calls (info) pass with its append grant; a reader's with its read grant.
    SCOPES: ClassVar[dict[str, Scope]] = {
        "get:read": _stream(READ),
        "get:checkpoint": _movement_of(RELEASE),
        "put:append": _stream(APPEND),
        "put:checkpoint": _checkpoint_of,
        "put:checkpoint_delta": _checkpoint_of,
        "action:declare": _stream(APPEND),
        "action:info": lambda r: Requirement.of(READ, APPEND, stream=str(r["stream"])),
        "action:ack": lambda r: Requirement.of(
            ACK, stream=str(r["stream"]), consumer=str(r["consumer"])
        ),
        "action:fence": _stream(FENCE),
        "action:advance": _stream(APPEND),
        "action:discard_checkpoint": _checkpoint_of,
        "action:release": _movement_of(RELEASE),
        # The warm hand-off (spark_jobs.runtime.warm): a live snapshot and the offset log it
        # follows, for the target of the prepared movement, like a release.
        "action:warm": _movement_of(RELEASE),
        "action:offsets": _movement_of(RELEASE),
        # An active replica's DPC state (spark_jobs.runtime.active), asked by the consumers of
        # the log it writes: whoever may read that log may ask.
        "action:dpc_state": _stream(READ),
        # For one movement (the aborted or committed one the registry names the caller in).
        "action:reinstate": _movement_of(REINSTATE),
        "action:retire": _movement_of(RETIRE),
    }

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every subclass's handlers get the same guard: an action added there without a scope
        # is refused, never served unchecked.
        super().__init_subclass__(**kwargs)
        for method in ("do_get", "do_put", "do_action"):
            handler = cls.__dict__.get(method)
            if handler is not None and not getattr(handler, "__fedload_guarded__", False):
                setattr(cls, method, _guarded(method, handler))

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise: str | None = None,
        *,
        auth: FlightAuth | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        """Listen on ``host:port`` (port 0: any free one); ``advertise`` is the ``host[:port]``
        that others reach it at, when that differs (a wildcard listen, a NAT): the listen
        address otherwise. ``auth``: accept only calls with a token that covers them (every
        agent's endpoint; None only for in-process fixtures and scenario drivers). ``tls``:
        serve ``grpc+tls://`` with this certificate."""
        scheme = "grpc+tls" if tls is not None else "grpc"
        self.auth = auth
        super().__init__(
            f"{scheme}://{host}:{port}",
            tls_certificates=tls.server_certificates() if tls is not None else None,
            middleware=auth.middleware() if auth is not None else None,
        )
        self.log = StreamLog()
        self._inbox: dict[tuple[str, int], PackedCheckpoint] = {}
        self._inbox_lock = threading.Lock()
        # Checkpoints this host released for a movement, until the mover has pulled them.
        self._outbox: dict[tuple[str, int], PackedCheckpoint] = {}
        self.handler: HostHandler | None = None
        # Further actions by name, each answered with its handler's JSON result: verbs a module
        # adds beside the host's own (the warm hand-off's ``warm`` and ``offsets``). Each needs
        # its entry in SCOPES too, or an endpoint with ``auth`` refuses it.
        self.actions: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.location = _advertised(advertise, host, self.port, scheme)

    def authorize(self, context: Any, method: str, request: Any) -> None:
        """Refuse (raising the Flight error that says why) a request the call's token does not
        cover; nothing has been done yet when this runs."""
        assert self.auth is not None
        try:
            if method == "do_action":
                kind = f"action:{request.type}"
                body = json.loads(request.body.to_pybytes()) if request.body.size else {}
            else:
                raw = request.ticket if method == "do_get" else request.command
                body = json.loads(raw)
                kind = f"{'get' if method == 'do_get' else 'put'}:{body.get('op')}"
            scope = self.SCOPES.get(kind)
            if scope is None:
                raise flight.FlightUnauthorizedError(
                    f"{REFUSED}: {kind} declares no scope on this endpoint, so nobody may call it"
                )
            requirement = scope(body)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise flight.FlightServerError(f"malformed request: {error!r}") from None
        self.auth.authorize(context, requirement)

    # -- streams -----------------------------------------------------------------------------
    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = json.loads(ticket.ticket)
        if request["op"] == "checkpoint":
            with self._inbox_lock:
                packed = self._outbox.pop((request["fragment"], int(request["movement"])), None)
            if packed is None:
                raise flight.FlightServerError(f"no released checkpoint for {request}")
            chunks = pa.array(_chunks(packed.data), pa.binary())
            return flight.RecordBatchStream(pa.table([chunks], schema=_CHUNK_SCHEMA))
        if request["op"] != "read":
            raise flight.FlightServerError(f"unknown DoGet op {request['op']!r}")
        try:
            schema, batches = self.log.read(
                request["stream"],
                int(request["lo"]),
                int(request["hi"]),
                strict=not request.get("held", False),
            )
        except KeyError as error:
            raise flight.FlightServerError(str(error)) from error
        if schema is None:
            schema = pa.schema([])
        return flight.RecordBatchStream(pa.Table.from_batches(batches, schema=schema))

    def do_put(
        self,
        context: Any,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        request = json.loads(descriptor.command)
        table = reader.read_all()
        if request["op"] == "append":
            try:
                fresh = self.log.append(
                    request["stream"],
                    table,
                    boundary=request.get("boundary"),
                    batch_id=request.get("batch_id"),
                    epoch=request.get("epoch"),
                )
            except FencedError as error:
                raise flight.FlightUnauthorizedError(str(error)) from error
            writer.write(pa.py_buffer(json.dumps({"fresh": fresh}).encode()))
        elif request["op"] in ("checkpoint", "checkpoint_delta"):
            chunks = table.column("chunk").to_pylist() if table.num_rows else []
            data = b"".join(chunks)
            digest = hashlib.sha256(data).hexdigest()
            if len(data) != request["size"] or digest != request["sha256"]:
                raise flight.FlightServerError(
                    f"checkpoint of {request['fragment']} refused: got {len(data)} bytes, "
                    f"sha256 {digest}, expected {request['size']} bytes, {request['sha256']}"
                )
            key = (request["fragment"], int(request["movement"]))
            if request["op"] == "checkpoint":
                with self._inbox_lock:
                    self._inbox[key] = PackedCheckpoint(data, digest)
            else:
                self._apply_delta(key, data)
        else:
            raise flight.FlightServerError(f"unknown DoPut op {request['op']!r}")

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        body = json.loads(action.body.to_pybytes()) if action.body.size else {}
        kind = action.type
        result: Any = None
        if kind == "declare":
            try:
                self.log.declare(body["stream"], float(body["bucket_seconds"]))
            except BucketWidthMismatch as error:
                raise flight.FlightServerError(str(error)) from error
        elif kind == "info":
            result = self.log.info(body["stream"])
        elif kind == "ack":
            self.log.ack(body["stream"], body["consumer"], int(body["bucket"]))
        elif kind == "fence":
            self.log.fence(body["stream"], int(body["epoch"]))
        elif kind == "advance":
            try:
                self.log.advance(
                    body["stream"],
                    int(body["boundary"]),
                    body.get("epoch"),
                    body.get("bucket_seconds"),
                )
            except FencedError as error:
                raise flight.FlightUnauthorizedError(str(error)) from error
            except BucketWidthMismatch as error:
                raise flight.FlightServerError(str(error)) from error
        elif kind == "discard_checkpoint":
            result = self.discard_checkpoint(body["fragment"], int(body["movement"]))
        elif kind in ("release", "reinstate", "retire"):
            result = self._host_action(kind, body)
        elif kind in self.actions:
            result = self._extra_action(kind, body)
        else:
            raise flight.FlightServerError(f"unknown action {kind!r}")
        yield json.dumps(result).encode()

    def _host_action(self, kind: str, body: dict[str, Any]) -> Any:
        if self.handler is None:
            raise flight.FlightServerError("this endpoint hosts no fragments")
        fragment = body["fragment"]
        try:
            if kind == "release":
                movement = int(body["movement"])
                return self.stage_checkpoint(
                    fragment, movement, self.handler.release_for(fragment, movement)
                )
            if kind == "reinstate":
                self.handler.reinstate(fragment, int(body["epoch"]))
            else:
                self.handler.retire(fragment)
        except flight.FlightError:
            raise
        except Exception as error:
            raise flight.FlightServerError(f"{kind} {fragment}: {error}") from error
        return None

    def _extra_action(self, kind: str, body: dict[str, Any]) -> Any:
        try:
            return self.actions[kind](body)
        except flight.FlightError:
            raise
        except Exception as error:
            raise flight.FlightServerError(f"{kind}: {error}") from error

    def stage_checkpoint(
        self, fragment: str, movement: int, packed: PackedCheckpoint
    ) -> dict[str, Any]:
        """Keep ``packed`` for the mover to pull (DoGet ``checkpoint``); what it announces."""
        with self._inbox_lock:
            self._outbox[(fragment, movement)] = packed
        return {"sha256": packed.sha256, "size": len(packed.data)}

    def _apply_delta(self, key: tuple[str, int], data: bytes) -> None:
        fragment, movement = key
        try:
            delta = TreeDelta.decode(data)
        except (DeltaMismatch, ValueError, KeyError) as error:
            raise flight.FlightServerError(f"delta of {fragment} refused: {error}") from error
        # Under the lock: a take or a newer ship between reading the copy and replacing it would
        # be lost or overwritten by a result computed from the older copy.
        with self._inbox_lock:
            held = self._inbox.get(key)
            if held is None:
                raise flight.FlightServerError(
                    f"delta of {fragment} refused: no copy held for movement {movement} to "
                    "apply it to"
                )
            try:
                tree = apply(unpack_tree(held.data), delta)
            except DeltaMismatch as error:
                raise flight.FlightServerError(f"delta of {fragment} refused: {error}") from error
            self._inbox[key] = PackedCheckpoint.of(pack_tree(tree))

    def discard_checkpoint(self, fragment: str, movement: int) -> bool:
        """Drop a shipped checkpoint nobody will restore (a standby that moved away); False if
        the inbox held none."""
        with self._inbox_lock:
            return self._inbox.pop((fragment, movement), None) is not None

    def take_checkpoint(self, fragment: str, movement: int) -> PackedCheckpoint:
        """The verified checkpoint shipped for this movement (removed from the inbox)."""
        with self._inbox_lock:
            try:
                return self._inbox.pop((fragment, movement))
            except KeyError:
                raise TransferError(
                    f"no verified checkpoint of {fragment} for movement {movement}"
                ) from None


for _method in ("do_get", "do_put", "do_action"):
    setattr(StreamServer, _method, _guarded(_method, getattr(StreamServer, _method)))


def _advertised(advertise: str | None, host: str, port: int, scheme: str = "grpc") -> str:
    if not advertise:
        return f"{scheme}://{host}:{port}"
    bare = advertise.removeprefix("grpc+tls://").removeprefix("grpc://")
    name, _, given = bare.rpartition(":")
    if not name:  # only a host was given: the port is the one actually bound
        return f"{scheme}://{given}:{port}"
    return f"{scheme}://{name}:{given}"


class StreamClient:
    """Client side of the protocol above; cheap to create, holds one gRPC channel."""

    def __init__(
        self,
        location: str,
        *,
        timeout: float | None = None,
        channel_options: list[tuple[str, Any]] | None = None,
        tokens: TokenSource | None = None,
        tls_roots: bytes | None = None,
    ) -> None:
        """``timeout``: a deadline in seconds on every call (None: wait as long as it takes).
        Across a partition a call without one waits for TCP to give up. ``tokens``: where each
        call's data-plane token comes from, ``tls_roots``: the authorities trusted for a
        ``grpc+tls://`` location (both default to this process's, ``use_client_defaults``)."""
        defaults = client_defaults()
        self.location = location
        self._tokens = tokens if tokens is not None else defaults.tokens
        roots = tls_roots if tls_roots is not None else defaults.tls_roots
        extra: dict[str, Any] = {}
        if roots is not None and location.startswith("grpc+tls://"):
            extra["tls_root_certs"] = roots
        self._client = flight.FlightClient(location, generic_options=channel_options, **extra)
        self._timeout = timeout

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _options(self, grant: Grant) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(
            timeout=self._timeout, headers=call_headers(self._tokens, self.location, grant)
        )

    def _action(self, kind: str, grant: Grant, **body: Any) -> Any:
        action = flight.Action(kind, json.dumps(body).encode())
        results = list(self._client.do_action(action, options=self._options(grant)))
        return json.loads(results[0].body.to_pybytes()) if results else None

    def declare(self, stream: str, bucket_seconds: float) -> None:
        self._action(
            "declare", _on_stream(APPEND, stream), stream=stream, bucket_seconds=bucket_seconds
        )

    def info(self, stream: str) -> dict[str, Any]:
        result: dict[str, Any] = self._action("info", _on_stream(READ, stream), stream=stream)
        return result

    def ack(self, stream: str, consumer: str, bucket: int) -> None:
        grant = Grant(frozenset({ACK}), stream=stream, consumer=consumer)
        self._action("ack", grant, stream=stream, consumer=consumer, bucket=bucket)

    def hold(self, stream: str, consumer: str, from_bucket: int | None = None) -> None:
        """Make the log keep what ``consumer`` will read: every bucket from ``from_bucket``
        (None: everything it still holds) until the consumer's own acknowledgements say
        otherwise. A log trims below the lowest acknowledgement of the consumers it knows, and
        it knows a consumer from its first ack; a consumer that has not acknowledged yet must
        hold first, or another consumer's ack drops buckets it has not read (seen in the demo:
        one fragment's ack trimmed three buckets its sibling was about to read). Never moves a
        known consumer's position back."""
        self.ack(stream, consumer, HOLD_ALL if from_bucket is None else from_bucket)

    def fence(self, stream: str, epoch: int) -> None:
        self._action("fence", _on_stream(FENCE, stream), stream=stream, epoch=epoch)

    def advance(
        self,
        stream: str,
        boundary: int,
        epoch: int | None = None,
        bucket_seconds: float | None = None,
    ) -> None:
        """``bucket_seconds``: the width ``boundary`` counts in, checked against the log's."""
        extra = {} if bucket_seconds is None else {"bucket_seconds": bucket_seconds}
        try:
            self._action(
                "advance",
                _on_stream(APPEND, stream),
                stream=stream,
                boundary=boundary,
                epoch=epoch,
                **extra,
            )
        except flight.FlightUnauthorizedError as error:
            raise _refusal(error) from error

    def read(
        self, stream: str, lo: int, hi: int, *, held: bool = False
    ) -> flight.FlightStreamReader:
        """Buckets [lo, hi). ``held``: whatever of them the log still holds; without it a
        range below what consumers acknowledged is refused (a consumer that lost its place)."""
        ticket = {"op": "read", "stream": stream, "lo": lo, "hi": hi, "held": held}
        return self._client.do_get(
            flight.Ticket(json.dumps(ticket).encode()), self._options(_on_stream(READ, stream))
        )

    def read_table(self, stream: str, lo: int | None = None, hi: int = 2**62) -> pa.Table:
        """The rows of [lo, hi), or with no ``lo`` every row the log still holds below ``hi``
        (what a failover compares with, whatever consumers acknowledged meanwhile)."""
        if lo is None:
            return self.read(stream, -(2**62), hi, held=True).read_all()
        return self.read(stream, lo, hi).read_all()

    def append(
        self,
        stream: str,
        table: pa.Table,
        *,
        boundary: int | None = None,
        batch_id: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Append rows; False when the batch id was already written. FencedError if stale."""
        command: dict[str, Any] = {"op": "append", "stream": stream}
        for key, value in (("boundary", boundary), ("batch_id", batch_id), ("epoch", epoch)):
            if value is not None:
                command[key] = value
        descriptor = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        try:
            writer, meta = self._client.do_put(
                descriptor, table.schema, self._options(_on_stream(APPEND, stream))
            )
            writer.write_table(table)
            writer.done_writing()
            answer = meta.read()
            writer.close()
        except flight.FlightUnauthorizedError as error:
            raise _refusal(error) from error
        return bool(json.loads(answer.to_pybytes())["fresh"]) if answer is not None else True

    def ship_checkpoint(self, fragment: str, movement: int, packed: PackedCheckpoint) -> None:
        """Push a packed checkpoint; the receiver verifies size and checksum or refuses it."""
        self._put_chunks("checkpoint", fragment, movement, packed)

    def ship_checkpoint_delta(self, fragment: str, movement: int, delta: TreeDelta) -> int:
        """Push a delta onto the checkpoint the receiver holds for this fragment and movement;
        ``TransferError`` if it holds none or another one. The bytes sent."""
        encoded = PackedCheckpoint.of(delta.encoded)
        self._put_chunks("checkpoint_delta", fragment, movement, encoded)
        return len(encoded.data)

    def _put_chunks(self, op: str, fragment: str, movement: int, packed: PackedCheckpoint) -> None:
        command = {
            "op": op,
            "fragment": fragment,
            "movement": movement,
            "sha256": packed.sha256,
            "size": len(packed.data),
        }
        descriptor = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        options = self._options(_checkpoint_grant(fragment, movement))
        try:
            writer, _ = self._client.do_put(descriptor, _CHUNK_SCHEMA, options)
            for chunk in _chunks(packed.data):
                writer.write_batch(pa.record_batch([pa.array([chunk], pa.binary())], _CHUNK_SCHEMA))
            writer.close()
        except flight.FlightError as error:
            raise TransferError(str(error)) from error

    def discard_checkpoint(self, fragment: str, movement: int) -> bool:
        """Ask the host to drop the checkpoint shipped to it under ``movement``; False if it
        held none."""
        grant = _checkpoint_grant(fragment, movement)
        return bool(self._action("discard_checkpoint", grant, fragment=fragment, movement=movement))

    def release(self, fragment: str, movement: int) -> PackedCheckpoint:
        """Ask the host to stop ``fragment`` after its last commit; pull, verify its checkpoint."""
        return self.staged("release", fragment, movement)

    def call(self, kind: str, grant: Grant, **body: Any) -> Any:
        """An action by name (``StreamServer.actions``) under ``grant``; TransferError if the
        host refuses it."""
        try:
            return self._action(kind, grant, **body)
        except flight.FlightError as error:
            raise TransferError(str(error)) from error

    def staged(self, kind: str, fragment: str, movement: int) -> PackedCheckpoint:
        """Run an action that stages a checkpoint of ``fragment`` for ``movement`` at the host
        (``release``, ``warm``); pull it and verify it against what the action announced. Both
        are a release's right: only the prepared movement's target may ask."""
        grant = _on_movement(RELEASE, fragment, movement)
        try:
            announced = self._action(kind, grant, fragment=fragment, movement=movement)
            ticket = {"op": "checkpoint", "fragment": fragment, "movement": movement}
            table = self._client.do_get(
                flight.Ticket(json.dumps(ticket).encode()), self._options(grant)
            ).read_all()
        except flight.FlightError as error:
            raise TransferError(str(error)) from error
        packed = PackedCheckpoint.of(b"".join(table.column("chunk").to_pylist()))
        if packed.sha256 != announced["sha256"] or len(packed.data) != announced["size"]:
            raise TransferError(f"checkpoint of {fragment} damaged in transit from {self.location}")
        return packed

    def reinstate(self, fragment: str, epoch: int, *, movement: int | None = None) -> None:
        """``movement``: the aborted movement that entitles the caller (the registry issues a
        reinstate token for one movement)."""
        grant = _on_movement(REINSTATE, fragment, movement)
        named = {} if movement is None else {"movement": movement}
        self._action("reinstate", grant, fragment=fragment, epoch=epoch, **named)

    def retire(self, fragment: str, *, movement: int | None = None) -> None:
        """``movement``: the committed movement that entitles the caller (required by an
        endpoint with ``auth``)."""
        named = {} if movement is None else {"movement": movement}
        self._action("retire", _on_movement(RETIRE, fragment, movement), fragment=fragment, **named)


def _on_stream(op: str, stream: str) -> Grant:
    return Grant(frozenset({op}), stream=stream)


def _checkpoint_grant(fragment: str, movement: int) -> Grant:
    if movement == STANDBY_SHIPMENT:
        return Grant(frozenset({STANDBY}), task=fragment)
    return _on_movement(CHECKPOINT, fragment, movement)


def _on_movement(op: str, fragment: str, movement: int | None) -> Grant:
    return Grant(frozenset({op}), task=fragment, movement=movement)


def _refusal(error: flight.FlightUnauthorizedError) -> Exception:
    """PERMISSION_DENIED is both a fenced write and a refused token: tell them apart."""
    if REFUSED in str(error):
        return AccessRefused(str(error))
    return FencedError(str(error))


def publish(
    client: StreamClient, stream: str, table: pa.Table, bucket_seconds: float, *, close: bool = True
) -> int:
    """Append a table sorted by stime bucket by bucket, each followed by its BOUNDARY.

    Returns the boundary sent last. With ``close`` the final bucket is closed too; otherwise it
    stays open (a live producer that may still add rows to it).
    """
    boundary = client.info(stream)["boundary"]
    buckets = list(split_buckets(table, bucket_seconds))
    for index, (bucket, rows) in enumerate(buckets):
        last = index == len(buckets) - 1
        boundary = bucket + 1 if (close or not last) else bucket
        client.append(stream, rows, boundary=boundary)
    return int(boundary) if boundary is not None else 0
