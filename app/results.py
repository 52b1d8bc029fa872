"""Reading a task's results: ``Results(api_url, key).rows(task)``, and ``fedload tail``.

A task's output is a log at its owner's agent (``<task>.out``, Arrow Flight), bucketed by event
time (``stime``); a bucket below the log's BOUNDARY is final. An application reads it with its
participant's API key and nothing else: the client asks the registry for a read token for the
stream (``POST /v1/dataplane/tokens``; the registry's answer names the participant that serves
the log), asks the registry for that participant's endpoint, and reads over Flight with the
token, renewed before it expires. Who may read is the registry's rule (``app.dataplane.service``):
the task's owner, its hosts and the parties of the tasks consuming it; an admin key reads any.

- ``rows(task)``: the stable rows of every final bucket the log holds, in bucket order; each row
  a dict of the output's columns (``json_row``: timestamps ISO-8601, JSON-ready).
- ``follow=True``: then every bucket as it closes, until the caller stops iterating.
  ``from_start=False`` with ``follow``: only buckets that close from now on.
- ``tentative=True``: what a DPC consumer sees, each row with its ``"kind"``: where the task has
  active copies (``active_standby`` replicas), the message sequence one copy sent
  (``<task>.out@<holder>.dpc``: STABLE and TENTATIVE rows, UNDO, corrections, REC_DONE; each with
  ``seq``, the copy's message number, and ``replica``). The copy is the one the registry reports
  in the best state when reading begins (its messages begin where that copy began). A task
  without one has only stable rows (a primary writes no others), each with kind STABLE. A log
  that carries a ``kind`` (and a ``version``) column itself keeps them on its rows.

This module speaks the log's wire protocol itself (``spark_jobs.runtime.transport``: DoGet
``read`` and the ``info`` action) with pyarrow's Flight client: the service side of ``app``
imports nothing of the Spark side.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from app.participant.client import FedloadClient

log = logging.getLogger("fedload.results")

KIND, VERSION = "kind", "version"
STABLE = "STABLE"
DPC_SUFFIX = ".dpc"
POLL_SECONDS = 0.5
# A token is fetched again this long before it expires.
RENEW_BEFORE_S = 30.0
ALL = 2**62
# Best first: the copy a consumer would read (a stable copy, then one still serving).
STATE_RANK = {"STABLE": 0, "UP_FAILURE": 1, "STABILIZATION": 2}


def json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or infinity
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def json_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """A row as a JSON object: timestamps ISO-8601, decimals as strings, bytes base64."""
    return {str(k): json_value(v) for k, v in record.items()}


@dataclass
class _Token:
    value: str
    expires_at: float


class LogReader:
    """One stream at one Flight endpoint, read with the tokens ``fetch`` returns."""

    def __init__(
        self,
        location: str,
        stream: str,
        fetch: Callable[[], tuple[str, float]] | None,
        *,
        timeout: float = 30.0,
        tls_roots: bytes | None = None,
    ) -> None:
        extra: dict[str, Any] = {}
        if tls_roots is not None and location.startswith("grpc+tls://"):
            extra["tls_root_certs"] = tls_roots
        self.location, self.stream, self._fetch, self._timeout = location, stream, fetch, timeout
        self._client = flight.FlightClient(location, **extra)
        self._token: _Token | None = None

    def _options(self) -> flight.FlightCallOptions:
        headers: list[tuple[bytes, bytes]] = []
        if self._fetch is not None:
            if self._token is None or time.time() >= self._token.expires_at - RENEW_BEFORE_S:
                self._token = _Token(*self._fetch())
            headers = [(b"authorization", f"Bearer {self._token.value}".encode())]
        return flight.FlightCallOptions(timeout=self._timeout, headers=headers)

    def info(self) -> dict[str, Any]:
        action = flight.Action("info", json.dumps({"stream": self.stream}).encode())
        results = list(self._client.do_action(action, options=self._options()))
        return dict(json.loads(results[0].body.to_pybytes()))

    def read(self, lo: int, hi: int) -> pa.Table:
        ticket = {"op": "read", "stream": self.stream, "lo": lo, "hi": hi}
        reader = self._client.do_get(flight.Ticket(json.dumps(ticket).encode()), self._options())
        return reader.read_all()

    def close(self) -> None:
        self._client.close()


Locate = Callable[[str], LogReader]


class Results:
    """A task's output as rows (module doc). ``locate``: where a stream is read from and with
    which tokens (default: asked of the registry at ``api_url`` with ``key``)."""

    def __init__(
        self,
        api_url: str | None = None,
        key: str | None = None,
        *,
        locate: Locate | None = None,
        copies: Callable[[str], list[str]] | None = None,
        poll_seconds: float = POLL_SECONDS,
        tls_roots: bytes | None = None,
    ) -> None:
        self._registry: FedloadClient | None = None
        if locate is None:
            if api_url is None or key is None:
                raise ValueError("Results needs the registry's URL and an API key")
            self._registry = FedloadClient(api_url, key)
        self._locate = locate or self._registry_reader
        self._copies = copies or self._active_copies
        self.poll_seconds, self._tls_roots = poll_seconds, tls_roots

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the registry: who serves a stream, and a token for it ---------------------------------
    def _registry_reader(self, stream: str) -> LogReader:
        registry = self._registry
        assert registry is not None

        def ask() -> dict[str, Any]:
            return registry.dataplane_token({"ops": ["read"], "stream": stream})

        def fetch() -> tuple[str, float]:
            return _token_of(ask())

        first = ask()
        serving = str(first["serving"])
        location = registry.endpoint(serving)
        if location is None:
            raise LookupError(f"{serving}, which serves {stream}, has reported no endpoint")
        reader = LogReader(location, stream, fetch, tls_roots=self._tls_roots)
        reader._token = _Token(*_token_of(first))
        return reader

    def _active_copies(self, task: str) -> list[str]:
        """Holders of the task's active copies, best reported state first."""
        if self._registry is None:
            return []
        rows = [
            r
            for r in self._registry.replicas()
            if r.get("task") == task and r.get("technique") == "active_standby"
        ]
        rows.sort(key=lambda r: (STATE_RANK.get(str(r.get("state")), 9), str(r.get("host"))))
        return [str(r["host"]) for r in rows]

    # -- rows ------------------------------------------------------------------------------
    def rows(
        self,
        task: str,
        follow: bool = False,
        tentative: bool = False,
        *,
        from_start: bool = True,
    ) -> Iterator[dict[str, Any]]:
        """The task's output rows (module doc); ``from_start`` matters only with ``follow``."""
        if tentative:
            holders = self._copies(task)
            if holders:
                stream = f"{task}.out@{holders[0]}{DPC_SUFFIX}"
                yield from self._messages(self._locate(stream), holders[0], follow, from_start)
                return
        yield from self._log_rows(self._locate(f"{task}.out"), follow, tentative, from_start)

    def _log_rows(
        self, reader: LogReader, follow: bool, tentative: bool, from_start: bool
    ) -> Iterator[dict[str, Any]]:
        try:
            info = reader.info()
            lo = _held_from(info) if (from_start or not follow) else info["boundary"]
            while True:
                boundary = info["boundary"]
                if lo is None:
                    lo = boundary
                if boundary is not None and lo is not None and lo < boundary:
                    try:
                        table = reader.read(lo, boundary)
                    except flight.FlightServerError as error:
                        if "acknowledged" not in str(error):
                            raise
                        # Another consumer's acknowledgement trimmed what we had not read yet:
                        # go on from what the log still holds, and say what was missed.
                        info = reader.info()
                        skipped_to = _held_from(info)
                        if skipped_to is None or skipped_to <= lo:
                            # The log refuses what it says it holds: asking again would loop.
                            raise
                        log.warning("%s: trimmed from %s to %s", reader.stream, lo, skipped_to)
                        lo = skipped_to
                        continue
                    yield from _table_rows(table, tentative)
                    lo = boundary
                if not follow:
                    return
                time.sleep(self.poll_seconds)
                info = reader.info()
        finally:
            reader.close()

    def _messages(
        self, reader: LogReader, holder: str, follow: bool, from_start: bool
    ) -> Iterator[dict[str, Any]]:
        """A DPC copy's companion stream: messages in sending order (their buckets are sending
        times, their ``seq`` increasing), each message once."""
        try:
            info = reader.info()
            width, lo = int(info["bucket_us"]), _held_from(info)
            last_seq = -1
            if follow and not from_start:
                table = reader.read(-ALL if lo is None else lo, ALL)
                if table.num_rows:
                    last_seq = int(max(table.column("seq").to_pylist()))
            while True:
                # From the bucket of the last message seen: later ones may still join it.
                table = reader.read(-ALL if lo is None else lo, ALL)
                for record in table.to_pylist():
                    if int(record["seq"]) <= last_seq:
                        continue
                    last_seq = int(record["seq"])
                    sent = record["stime"]
                    if isinstance(sent, dt.datetime):
                        micros = round(sent.timestamp() * 1_000_000)
                        lo = max(lo if lo is not None else -ALL, micros // width)
                    yield _message_row(record, holder)
                if not follow:
                    return
                time.sleep(self.poll_seconds)
        finally:
            reader.close()


def _token_of(issued: Mapping[str, Any]) -> tuple[str, float]:
    expires = dt.datetime.fromisoformat(str(issued["expires_at"]).replace("Z", "+00:00"))
    return str(issued["token"]), expires.timestamp()


def _held_from(info: Mapping[str, Any]) -> int | None:
    """The first bucket a reader that holds no position may ask for: the log's first held
    bucket (a log keeps its buckets whole from there, also acknowledged ones it keeps for
    readers), else what its consumers acknowledged."""
    first = info.get("first")
    if first is not None:
        return int(first)
    acks = [int(a) for a in (info.get("acks") or {}).values()]
    return min(acks) if acks else None


def _table_rows(table: pa.Table, tentative: bool) -> Iterator[dict[str, Any]]:
    kinded = KIND in table.column_names
    for record in table.to_pylist():
        kind = str(record.get(KIND) or STABLE) if kinded else STABLE
        if not tentative:
            if kind != STABLE:
                continue
            record.pop(KIND, None)
            record.pop(VERSION, None)
        else:
            record[KIND] = kind
        yield json_row(record)


def _message_row(record: Mapping[str, Any], holder: str) -> dict[str, Any]:
    """One DPC message (``spark_jobs.runtime.dpc.DPC_SCHEMA``) as a line: a row's columns (the
    message carries them as JSON, ``stime`` apart in ms), its kind, seq and the copy's holder."""
    out: dict[str, Any] = {}
    if record.get("row") is not None:
        out.update(json.loads(str(record["row"])))
    if record.get("row_stime_ms") is not None:
        stamp = dt.datetime.fromtimestamp(int(record["row_stime_ms"]) / 1000, dt.UTC)
        out["stime"] = stamp.isoformat()
    out.update({KIND: str(record[KIND]), "seq": int(record["seq"]), "replica": holder})
    if record.get(VERSION) is not None:
        out[VERSION] = record[VERSION]
    return json_row(out)
