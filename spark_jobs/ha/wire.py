"""DPC messages over Arrow Flight, beside the runtime's bucketed stream logs.

``HAServer`` extends the runtime's ``StreamServer`` (so a host keeps one Flight endpoint, and the
checkpoint inbox used by the movement path serves passive standby too) with:

- DoGet ``{"op": "dpc_read", "stream", "from", "after"?}``: the messages of an output log from a
  position, leaving out stable rows at or before the reader's last key;
- DoGet ``{"op": "dpc_resync", "stream", "after": [stime, tid] | null}``: stable rows after a key,
  the boundary, then the current tentative suffix (a consumer switching to this replica);
  both answer a table (kind, stime, tid, payload JSON) whose schema metadata holds ``next_seq``;
- actions ``dpc_state`` (the heartbeat: node name, DPC state, lease epoch), ``dpc_ack``,
  ``dpc_info``, ``dpc_permission`` / ``dpc_release`` (reconciliation permission between
  replicas) and ``ha_control`` (the scenario driver's commands), answered by the node.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.flight as flight

from app.availability import Message, OutputLog, Row
from app.availability.tuples import Kind
from spark_jobs.runtime.transport import StreamServer

SCHEMA = pa.schema(
    [("kind", pa.string()), ("stime", pa.int64()), ("tid", pa.string()), ("payload", pa.string())]
)


def to_table(messages: list[Message], next_seq: int) -> pa.Table:
    kinds, stimes, tids, payloads = [], [], [], []
    for m in messages:
        kinds.append(m.kind.value)
        stimes.append(m.row.stime if m.row is not None else m.stime)
        tids.append(m.row.tid if m.row is not None else None)
        payloads.append(json.dumps(list(m.row.payload)) if m.row is not None else None)
    schema = SCHEMA.with_metadata({"next_seq": str(next_seq)})
    return pa.table([kinds, stimes, tids, payloads], schema=schema)


def from_table(table: pa.Table) -> tuple[list[Message], int]:
    metadata = table.schema.metadata or {}
    next_seq = int(metadata[b"next_seq"])
    out: list[Message] = []
    for kind, stime, tid, payload in zip(
        table.column("kind").to_pylist(),
        table.column("stime").to_pylist(),
        table.column("tid").to_pylist(),
        table.column("payload").to_pylist(),
        strict=True,
    ):
        k = Kind(kind)
        if tid is not None:
            out.append(Message(k, Row(int(stime), tid, tuple(json.loads(payload))), int(stime)))
        else:
            out.append(Message(k, None, int(stime)))
    return out, next_seq


class Controller(Protocol):
    """The node behind an HAServer."""

    def heartbeat(self) -> dict[str, Any]: ...

    def permission(self, requester: str) -> bool: ...

    def release(self, requester: str) -> None: ...

    def control(self, body: dict[str, Any]) -> Any: ...


class HAServer(StreamServer):
    def __init__(self, port: int = 0) -> None:
        super().__init__(port=port)
        self.dpc_lock = threading.Lock()
        self.dpc_logs: dict[str, OutputLog] = {}
        self.controller: Controller | None = None

    def output(self, stream: str) -> OutputLog:
        with self.dpc_lock:
            return self.dpc_logs.setdefault(stream, OutputLog())

    def append(self, stream: str, messages: list[Message]) -> None:
        if messages:
            log = self.output(stream)
            with self.dpc_lock:
                log.append(messages)

    def take_checkpoints(self, fragment: str) -> list[tuple[int, dict[str, Any]]]:
        """Every checkpoint shipped here for ``fragment`` (passive standby), oldest first,
        decoded: full ones and the deltas after them. Removed from the inbox."""
        with self._inbox_lock:
            movements = sorted(m for (f, m) in self._inbox if f == fragment)
        return [(m, json.loads(self.take_checkpoint(fragment, m).data)) for m in movements]

    def do_put(
        self,
        context: Any,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        super().do_put(context, descriptor, reader, writer)
        request = json.loads(descriptor.command)
        if request.get("op") != "checkpoint":
            return
        # A full checkpoint makes every older one of the fragment useless: drop them, so a
        # backup holds at most one full checkpoint and the deltas since.
        fragment, movement = request["fragment"], int(request["movement"])
        with self._inbox_lock:
            packed = self._inbox.get((fragment, movement))
            if packed is None or json.loads(packed.data).get("kind") != "full":
                return
            for key in [k for k in self._inbox if k[0] == fragment and k[1] < movement]:
                del self._inbox[key]

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = json.loads(ticket.ticket)
        op = request.get("op")
        if op not in ("dpc_read", "dpc_resync"):
            return super().do_get(context, ticket)
        log = self.output(request["stream"])
        with self.dpc_lock:
            try:
                if op == "dpc_read":
                    after = request.get("after")
                    key = (int(after[0]), str(after[1])) if after else None
                    messages, next_seq = log.read(int(request["from"]), after=key)
                else:
                    after = request.get("after")
                    key = (int(after[0]), str(after[1])) if after else None
                    messages, next_seq = log.resync(key)
            except KeyError as error:
                raise flight.FlightServerError(str(error)) from error
        return flight.RecordBatchStream(to_table(messages, next_seq))

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        kind = action.type
        if not kind.startswith(("dpc_", "ha_")):
            yield from super().do_action(context, action)
            return
        body = json.loads(action.body.to_pybytes()) if action.body.size else {}
        result: Any = None
        if kind == "dpc_ack":
            log = self.output(body["stream"])
            with self.dpc_lock:
                log.ack(body["consumer"], int(body["stime"]))
        elif kind == "dpc_info":
            log = self.output(body["stream"])
            with self.dpc_lock:
                result = {
                    "acks": dict(log.acks),
                    "first_seq": log.first_seq,
                    "next_seq": log.next_seq,
                    "boundary": log.boundary,
                }
        elif self.controller is None:
            raise flight.FlightServerError(f"{kind}: this endpoint runs no DPC node")
        elif kind == "dpc_state":
            result = self.controller.heartbeat()
        elif kind == "dpc_permission":
            result = self.controller.permission(body["requester"])
        elif kind == "dpc_release":
            self.controller.release(body["requester"])
        elif kind == "ha_control":
            result = self.controller.control(body)
        else:
            raise flight.FlightServerError(f"unknown action {kind!r}")
        yield json.dumps(result).encode()


class HAClient:
    """Client side, with a timeout on every call: a partition must not hang the caller.

    gRPC channels back off for seconds after a connection failure, so after any error the
    channel is dropped and the next call opens a fresh one (a healed link is used at once).
    """

    def __init__(self, location: str, timeout: float = 0.5) -> None:
        self.location = location
        self.timeout = timeout
        self._client: flight.FlightClient | None = None

    def _get(self) -> flight.FlightClient:
        if self._client is None:
            self._client = flight.FlightClient(self.location)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _options(self) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(timeout=self.timeout)

    def action(self, kind: str, **body: Any) -> Any:
        try:
            results = list(
                self._get().do_action(
                    flight.Action(kind, json.dumps(body).encode()), options=self._options()
                )
            )
        except Exception:
            self.close()
            raise
        return json.loads(results[0].body.to_pybytes()) if results else None

    def _get_table(self, ticket: dict[str, Any]) -> tuple[list[Message], int]:
        try:
            reader = self._get().do_get(
                flight.Ticket(json.dumps(ticket).encode()), options=self._options()
            )
            return from_table(reader.read_all())
        except Exception:
            self.close()
            raise

    def read(
        self, stream: str, position: int, after: tuple[int, str] | None = None
    ) -> tuple[list[Message], int]:
        return self._get_table(
            {
                "op": "dpc_read",
                "stream": stream,
                "from": position,
                "after": list(after) if after else None,
            }
        )

    def resync(self, stream: str, after: tuple[int, str] | None) -> tuple[list[Message], int]:
        return self._get_table(
            {"op": "dpc_resync", "stream": stream, "after": list(after) if after else None}
        )
