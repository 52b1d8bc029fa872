"""Publishing an application's rows into a Flight source task's log (``source: {kind: flight}``).

An application holding its participant's API key publishes Arrow tables into the replayable log
of one of its own source tasks::

    with Publisher("http://127.0.0.1:8000", key, "sensors") as publisher:
        publisher.publish(table)            # -> Published(rows=..., late=..., fresh=True)

``Publisher`` reads the task from the registry (its declared schema and event-time column), asks
the registry for a data-plane token to append to ``<task>.out`` and for the endpoint that serves
it (the owner's agent, or the partner running the source), and then, for each publish:

- checks the table against the declared schema: every declared column present (a
  ``SchemaMismatch`` names the first one missing or of a type that does not cast), extra columns
  dropped, columns cast to the declared types;
- adds ``stime``, the federation's event time, from the declared event-time column;
- drops the rows later than the log's boundary (their bucket is closed: a reader already released
  it) and counts them in ``Published.late``;
- appends the rest in one call, under a batch id (the caller's, or a digest of the table's rows):
  a retried publish of the same batch is not appended twice; the same call advances the log's
  BOUNDARY to the bucket of (latest event time published - ``lateness``), the Flight source's
  lateness rule.

The log is the owner's, in memory: an owner that restarts starts it empty (what it held is gone,
and a batch id it had is accepted again).

The pure helpers here (``arrow_schema``, ``conform``, ``lateness_seconds``) are the ones every
source kind uses (``spark_jobs.sources``): the same declared schema means the same log columns.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import typer

from app.dataplane.tokens import APPEND, Grant
from app.participant.client import ApiError, FedloadClient
from app.user_errors import UserError
from app.work.errors import FragmentError
from app.work.spec import (
    STIME,
    SourceSpec,
    StreamSchema,
    Work,
    check_interval,
    interval_seconds,
)

DEFAULT_BUCKET_SECONDS = 1.0
_SIMPLE_ARROW: dict[str, pa.DataType] = {
    "string": pa.string(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    # Spark reads timestamps as microseconds in UTC (the session's time zone): the log holds them
    # so, and SUnion hands them to a fragment unconverted.
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "binary": pa.binary(),
}


class SchemaMismatch(ValueError):
    """Rows that do not fit a stream's declared schema; the message names the column."""


class PublishError(RuntimeError):
    """The task cannot take published rows (not a Flight source, no endpoint yet, refused)."""


def arrow_type(ddl_type: str) -> pa.DataType:
    """The Arrow type of a column declared in Spark's DDL spelling (``app.work.spec``)."""
    text = ddl_type.strip().lower()
    if text in _SIMPLE_ARROW:
        return _SIMPLE_ARROW[text]
    decimal = re.fullmatch(r"decimal\((\d+),(\d+)\)", text.replace(" ", ""))
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    if text.startswith("array<") and text.endswith(">"):
        return pa.list_(arrow_type(text[6:-1]))
    if text.startswith("map<") and text.endswith(">"):
        key, value = _split_top(text[4:-1])
        return pa.map_(arrow_type(key), arrow_type(value))
    if text.startswith("struct<") and text.endswith(">"):
        fields = []
        for part in _split_top(text[7:-1]):
            name, _, kind = part.partition(":")
            fields.append(pa.field(name.strip().strip("`"), arrow_type(kind)))
        return pa.struct(fields)
    raise SchemaMismatch(f"no Arrow type for the declared type {ddl_type!r}")


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "<("
        depth -= char in ">)"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def arrow_schema(schema: StreamSchema) -> pa.Schema:
    """The Arrow schema of a source's log: its declared columns, then ``stime``."""
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in schema.with_stime().columns])


def conform(table: pa.Table, schema: StreamSchema, event_time: str) -> pa.Table:
    """``table`` as its source's log holds it: the declared columns in declared order, cast to
    their types, and ``stime`` from ``event_time``. ``SchemaMismatch`` names the column that is
    missing or does not cast; rows without an event time are refused the same way (a row with
    no bucket has no place in the log)."""
    target = arrow_schema(schema)
    present = {name.lower(): name for name in table.column_names}
    columns = []
    for column in schema.columns:
        given = present.get(column.name.lower())
        if given is None:
            raise SchemaMismatch(
                f"column {column.name!r} ({column.type}) is missing; the table has "
                f"{', '.join(table.column_names) or 'no columns'}"
            )
        wanted = target.field(column.name).type
        try:
            columns.append(_cast(table.column(given), wanted))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as error:
            raise SchemaMismatch(
                f"column {column.name!r} is {table.schema.field(given).type}, which does not "
                f"cast to the declared {column.type}: {error}"
            ) from None
    out = pa.Table.from_arrays(columns, names=list(schema.names))
    if schema.get(STIME) is None:
        stime = _cast(out.column(schema.get(event_time).name), pa.timestamp("us", tz="UTC"))  # type: ignore[union-attr]
        out = out.append_column(STIME, stime)
    if out.column(STIME).null_count:
        raise SchemaMismatch(f"column {event_time!r} (the event time) has null values")
    return out.cast(target)


def _cast(values: pa.ChunkedArray, wanted: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_timestamp(wanted) and pa.types.is_string(values.type):
        # ISO strings ("2026-01-01T00:00:00Z"): parsed, naive ones taken as UTC, as Spark does
        # with its session time zone UTC.
        try:
            parsed = pc.cast(values, pa.timestamp("us", tz="UTC"))
        except pa.ArrowInvalid:
            parsed = pa.chunked_array(
                [pa.array([_iso(v) for v in values.to_pylist()], pa.timestamp("us", tz="UTC"))]
            )
        return parsed.cast(wanted)
    if pa.types.is_timestamp(wanted) and pa.types.is_timestamp(values.type):
        if values.type.tz is None and wanted.tz is not None:
            values = pc.assume_timezone(values, "UTC")
        return values.cast(wanted)
    return values.cast(wanted)


def _iso(text: str | None) -> datetime | None:
    if text is None:
        return None
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def lateness_seconds(options: Mapping[str, Any]) -> float:
    """A source's ``lateness`` option ("10 seconds", "1 minute"; default 0): how far behind the
    latest event time seen its log's boundary stays, so rows that late still find their bucket
    open. With 0 the bucket of the latest event stays open and every bucket before it closes."""
    text = options.get("lateness", "0 seconds")
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    try:
        return interval_seconds(check_interval(text, ("lateness",)))
    except FragmentError as error:
        raise ValueError(
            f"lateness {text!r} is not an interval like '10 seconds' or '1 minute'"
        ) from error


def boundary_after(max_event_us: int, lateness_s: float, bucket_seconds: float) -> int:
    """The log's boundary once events up to ``max_event_us`` were seen: the bucket of
    (``max_event_us`` - lateness), itself still open."""
    bucket_us = round(bucket_seconds * 1_000_000)
    return int((max_event_us - round(lateness_s * 1_000_000)) // bucket_us)


def buckets_of(table: pa.Table, bucket_seconds: float) -> Any:
    """The bucket number of each row (numpy), from its ``stime``."""
    micros = table.column(STIME).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
    return micros // round(bucket_seconds * 1_000_000)


def batch_digest(table: pa.Table) -> int:
    """A batch id from a table's contents: a retried publish of the same rows gets the same id
    (63 bits, positive, as the log's batch ids are)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    digest = hashlib.sha256(sink.getvalue().to_pybytes()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class Published:
    rows: int  # rows appended
    late: int  # rows dropped: their bucket was closed already
    fresh: bool  # False: the batch id was appended before, nothing changed
    batch_id: int
    boundary: int | None  # the log's boundary after the publish


class Publisher:
    """An application's writer into the log of its Flight source task ``task``."""

    def __init__(
        self,
        api_url: str,
        key: str,
        task: str,
        *,
        client: Any = None,
        bucket_seconds: float = DEFAULT_BUCKET_SECONDS,
        tls_roots: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        """``client``: the registry (a ``FedloadClient`` for ``api_url`` and ``key`` unless
        given: tests pass a stand-in with ``task``, ``endpoint`` and ``dataplane_token``).
        ``bucket_seconds``: the federation's (``fedload agent --bucket-seconds``), checked
        against the log's own width at the first publish."""
        self._registry = client if client is not None else FedloadClient(api_url, key)
        self._owns_registry = client is None
        self.task, self.stream = task, f"{task}.out"
        self.bucket_seconds = bucket_seconds
        self.source = _flight_source(task, self._registry.task(task))
        self.schema = self.source.schema
        self.lateness_s = lateness_seconds(self.source.options)
        self._tls_roots, self._timeout = tls_roots, timeout
        self._flight: flight.FlightClient | None = None
        self._token: str | None = None
        self._serving = ""
        self._renew_at = 0.0

    def close(self) -> None:
        if self._flight is not None:
            self._flight.close()
        if self._owns_registry:
            self._registry.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _issue(self) -> str:
        """A token to append to the stream (and read its info): asked of the registry, kept
        until half its life is gone, so a long-lived publisher never sends an expired one."""
        now = time.time()
        if self._token is None or now >= self._renew_at:
            issued = self._registry.dataplane_token(
                Grant(frozenset({APPEND}), stream=self.stream).to_json()
            )
            expires = datetime.fromisoformat(str(issued["expires_at"]).replace("Z", "+00:00"))
            self._token, self._serving = str(issued["token"]), str(issued["serving"])
            self._renew_at = now + max(0.0, expires.timestamp() - now) / 2
        return self._token

    def _connect(self) -> flight.FlightClient:
        if self._flight is None:
            self._issue()
            location = self._registry.endpoint(self._serving)
            if location is None:
                raise PublishError(
                    f"{self._serving}, which serves {self.stream}, has reported no endpoint "
                    "yet: is its agent running?"
                )
            extra = {"tls_root_certs": self._tls_roots} if self._tls_roots else {}
            self._flight = flight.FlightClient(location, **extra)
            info = self._info()
            width = int(info["bucket_us"]) / 1e6
            if round(width * 1e6) != round(self.bucket_seconds * 1e6):
                raise PublishError(
                    f"{self.stream} has buckets of {width:g} s, not {self.bucket_seconds:g} s: "
                    "publish with the federation's --bucket-seconds"
                )
        return self._flight

    def _options(self) -> flight.FlightCallOptions:
        headers = [(b"authorization", f"Bearer {self._issue()}".encode())]
        return flight.FlightCallOptions(timeout=self._timeout, headers=headers)

    def _info(self) -> dict[str, Any]:
        assert self._flight is not None
        action = flight.Action("info", json.dumps({"stream": self.stream}).encode())
        results = list(self._flight.do_action(action, options=self._options()))
        return dict(json.loads(results[0].body.to_pybytes()))

    def publish(
        self,
        data: pa.Table | pa.RecordBatch | Sequence[pa.RecordBatch],
        *,
        batch_id: int | None = None,
    ) -> Published:
        """Append ``data`` (see the module docstring); ``batch_id``: the caller's id of this
        batch (default: a digest of its conformed rows), the same on every retry of it."""
        table = _as_table(data)
        rows = conform(table, self.schema, self.source.event_time)
        ident = batch_digest(rows) if batch_id is None else int(batch_id)
        client = self._connect()
        closed = self._info().get("boundary")
        buckets = buckets_of(rows, self.bucket_seconds)
        if closed is not None:
            keep = buckets >= int(closed)
            late = int(rows.num_rows - keep.sum())
            rows, buckets = rows.filter(pa.array(keep)), buckets[keep]
        else:
            late = 0
        command: dict[str, Any] = {"op": "append", "stream": self.stream, "batch_id": ident}
        if rows.num_rows:
            latest = int(rows.column(STIME).cast(pa.int64()).to_numpy().max())
            command["boundary"] = boundary_after(latest, self.lateness_s, self.bucket_seconds)
        descriptor = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        writer, meta = client.do_put(descriptor, rows.schema, self._options())
        writer.write_table(rows)
        writer.done_writing()
        answer = meta.read()
        writer.close()
        fresh = bool(json.loads(answer.to_pybytes())["fresh"]) if answer is not None else True
        return Published(
            rows=rows.num_rows if fresh else 0,
            late=late,
            fresh=fresh,
            batch_id=ident,
            boundary=self._info().get("boundary"),
        )


def _as_table(data: pa.Table | pa.RecordBatch | Sequence[pa.RecordBatch]) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    return pa.Table.from_batches(list(data))


def _flight_source(task: str, row: Mapping[str, Any]) -> SourceSpec:
    source = Work.from_json(row.get("work") or {}).source
    if source is None or source.kind != "flight":
        kind = "no source" if source is None else f"a {source.kind} source"
        raise PublishError(f"{task} is {kind}: only a flight source takes published rows")
    return source


def read_file(path: Path) -> pa.Table:
    """A table from ``.parquet``, ``.csv`` or JSON lines (``.jsonl``, ``.json``)."""
    if not path.is_file():
        raise ValueError(f"{path} is no file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if suffix == ".csv":
        import pyarrow.csv as pcsv

        return pcsv.read_csv(path)
    if suffix in (".jsonl", ".json", ".ndjson"):
        import pyarrow.json as pjson

        return pjson.read_json(path)
    raise ValueError(f"{path}: publish reads .parquet, .csv or JSON lines (.jsonl/.json)")


def publish_file(
    task: str,
    file: Path,
    *,
    api: str,
    key: str,
    batch_id: int | None = None,
    bucket_seconds: float = DEFAULT_BUCKET_SECONDS,
    client: Any = None,
) -> Published:
    """Publish FILE's rows into TASK's log (see ``Publisher``; ``client`` as there)."""
    table = read_file(file)
    with Publisher(api, key, task, bucket_seconds=bucket_seconds, client=client) as publisher:
        return publisher.publish(table, batch_id=batch_id)


def publish_command(
    task: str = typer.Argument(..., help="The flight source task to publish into."),
    file: Path = typer.Argument(..., help="Rows: a .parquet, .csv or JSON-lines file."),
    api: str = typer.Option("http://127.0.0.1:8000", "--api", help="The service's base URL."),
    key: str = typer.Option(
        ..., "--key", envvar="FEDLOAD_API_KEY", help="The owning participant's API key."
    ),
    batch_id: int | None = typer.Option(
        None,
        "--batch-id",
        help="This batch's id (default: a digest of its rows); a retry "
        "with the same id is not appended twice.",
    ),
    bucket_seconds: float = typer.Option(
        DEFAULT_BUCKET_SECONDS,
        "--bucket-seconds",
        envvar="FEDLOAD_BUCKET_SECONDS",
        help="The federation's bucket width (its agents' --bucket-seconds).",
    ),
) -> None:
    """Publish FILE's rows into the log of TASK, a flight source of your participant.

    Rows are checked against the task's declared schema, given their event time, and appended
    bucket by bucket; rows whose bucket the log has closed already are counted as late and
    dropped.
    """
    try:
        done = publish_file(
            task, file, api=api, key=key, batch_id=batch_id, bucket_seconds=bucket_seconds
        )
    except (SchemaMismatch, PublishError, ValueError, OSError) as error:
        raise UserError(f"publish {task} {file}: {error}") from error
    except ApiError as error:
        raise UserError(f"publish {task}: the registry said {error}") from error
    state = "appended" if done.fresh else "already appended (same batch id): nothing changed"
    typer.echo(
        f"{task}: batch {done.batch_id} {state}: {done.rows} rows, {done.late} late rows "
        f"dropped, boundary {done.boundary}"
    )


__all__ = [
    "PublishError",
    "Published",
    "Publisher",
    "SchemaMismatch",
    "arrow_schema",
    "conform",
    "lateness_seconds",
    "publish_command",
    "publish_file",
    "read_file",
]
