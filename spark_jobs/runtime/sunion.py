"""SUnion: the streaming source of every fragment, as a Spark 4 Python data source.

SUnion merges a fragment's input streams (same schema) and serialises them by event time. Each
stream lives in its producer's output log (``StreamServer``), grouped in stime buckets of
``bucket_seconds``. The source's offset is a bucket number, ``{"bucket": n}``, meaning "every
bucket below n"; a micro-batch reads the buckets [start, end) of every input. On the stable path a
bucket is released only once every input's BOUNDARY has passed it (``latestOffset`` returns the
minimum of the inputs' boundaries), so a batch never misses a row that arrives later, and the
offset log in Spark's checkpoint says exactly which buckets the state has seen: that is what lets
a restored checkpoint resume anywhere.

Where each method runs (Spark 4): ``initialOffset``/``latestOffset``/``partitions``/``commit`` in
one long-lived Python process beside the driver, ``read`` in executor Python workers, each on an
unpickled copy of the reader. Nothing is shared in memory with the runtime that started the
query, so all coordination is through the Flight endpoints named in the options.

Options: ``inputs`` (JSON list of ``{"location", "stream"}``), ``consumer`` (the fragment name:
acknowledgements belong to the fragment, not to a host, so a moved fragment keeps its place),
``start_bucket`` (replay point when there is no checkpoint), ``max_buckets_per_batch``.

Replicated inputs: an input may name ``alternates`` (``[{"location", "stream"}, ...]``), the
stable logs of the same stream written by active copies of its producer (Borealis SIGMOD 2005,
4.3). Every copy of a deterministic fragment over SUnion-serialised input writes the same stable
rows per bucket, so a bucket complete in any copy's log is the bucket: the input's boundary is
the furthest boundary of its reachable sources, and each bucket is read from the first source
(the primary first) whose log holds it complete. A primary cut off, or behind after a heal, is
then passed over bucket by bucket, at bucket edges, with nothing lost or read twice, and a
copy's log holds only stable rows, so whatever is read from it is stable (the one consumer
rule's "a STABLE replica first", ``app.availability.consumer``, on the stable logs). Every
reachable source gets the fragment's acknowledgements, so each keeps what a restart must read
again, each up to its own boundary at most: a source behind (a primary cut off, a copy that
lags) is not told the fragment consumed buckets it has not completed yet, or what its writer
appends there later would be trimmed at once. The spool and the offsets are per input, not per
source.

DPC (optional, ``delay_budget_ms`` set): a bucket some input has not closed is released
TENTATIVE once the clock passes its end plus the budget (``app.availability.sunion`` decides;
see ``spark_jobs/runtime/dpc.py`` for the rest). Such an offset carries ``tentative_from``, the
first bucket of its range released without every boundary; it lands in Spark's offset log, which
is how the sink learns that a batch is tentative. Extra options: ``bucket_ms`` (the bucket width
in stime milliseconds), ``delay_strategy`` (``delay_each``/``delay_first``), and the clock: an
injected one (``clock_location``/``clock_stream``: "now" in ms is that stream's boundary) or wall
time shifted by ``clock_offset_ms`` (now = wall ms - offset). If the declared schema has a
string column ``kind`` the source fills it with STABLE/TENTATIVE per row; if it has an int
column ``fedload_input``, with the index of the row's input in ``inputs`` (a SQL fragment's view
of one input, ``spark_jobs.fragments.sql``), and then columns are matched by name, an input's
rows holding nulls in columns only other inputs have. Reconciliation state
that must survive a driver restart comes in two more options: ``first_tentative`` (a node that
restarts in failure: the reader is in failure from that bucket, as if it had released it) and
``ack_limit_file`` (a file holding a bucket number: while it exists, acknowledgements stop there,
so the producers keep what a redo from the all-stable checkpoint reads again, whichever of the
node's queries commits). ``budget_file``: a file holding the delay budget in ms, read on every
trigger (the node lowers it from the measured batch time so that X holds on a busy machine;
absent, ``delay_budget_ms`` applies). ``hold_healed=false`` turns off the hold of now-stable
buckets in failure: a node that redoes on a copy of its query keeps serving, and holding would
add the budget to every new bucket. ``pause_file`` (a DPC redo copy only): while that file exists
the reader plans no new batch (the offset stays at its start), so the node can make the redo
yield the cores to the serving query when a serving batch is due (``dpc.py``, ``DPCFragment``).
``stable_only_file`` (a DPC redo copy too): while that file exists the reader releases stable
buckets only, however late an input is: a redo exists to produce the stable version of what the
serving query sent tentatively, and a tentative bucket would make it useless (the serving copy
covers X meanwhile). The node removes the file when the copy becomes the serving query.
``follow_file`` (a warm copy, ``spark_jobs.runtime.follow``): plan the batch ranges that file
names (the source's) rather than from the boundaries, until it says to lead. ``pace_file`` (the
source of a warm hand-off, ``spark_jobs.runtime.pace``): while that file says a copy is behind,
plan the next batch only after a short hold, so the copy catches up. ``alternates_file`` (a
file the agent keeps, ``{"<location>/<stream>": [alternates]}`` per input): the inputs'
alternates from then on, re-read whenever it changes, so a fragment reads an active copy placed
after it started without a restart (``FragmentRuntime.update_alternates``).

Unreachable inputs (a cut link, a partition). DPC exists to keep producing when an input is
gone, so the source must not fail the query when a producer cannot be reached:

- The reader's Flight calls on the driver, and its reads of TENTATIVE ranges, have a deadline
  (``call_timeout_ms``, default 1000; shorter fails healthy calls on a busy machine; the
  per-trigger boundary query has its own, ``info_timeout_ms``, default 250) and catch
  exactly the transport failures (unavailable, timed out, cancelled); anything else (an unknown
  stream, acknowledged data asked for) still fails loudly. On ``latestOffset`` an unreachable
  input counts as "no new boundary": its last known one is kept, so the DPC rules release
  tentatively after the budget, exactly as for a producer that went quiet. ``commit`` skips an
  unreachable input's acknowledgement (acknowledgements only grow: the next commit sends a
  later one). A failed call drops the client, and clients use a short reconnect backoff, because
  gRPC otherwise keeps a refused channel in exponential backoff long after the heal. It also
  makes the location *suspect*: a background thread probes it (every 0.1 s) and, until it
  answers, the planning path does not call it at all, so only the first trigger after a cut
  pays the deadline (a partition is silence: every trigger would otherwise wait for it, and the
  wait would add to every tentative release).
- ``read`` runs on executors *after* the driver planned the batch; a batch planned just before a
  cut would fail if ``read`` fetched its rows from the producer then. So with ``spool_dir``
  set, the driver copies each input's buckets into a local spool as soon as they are complete
  for that input (below its boundary), one Arrow IPC file per input and bucket, written to a
  temporary name then renamed, so a reader sees a whole file or none. The boundary the release
  rules see for an input is its *spool frontier* (the first bucket not yet spooled), not the
  producer's boundary: whatever is released stable is already local, so a stable range never
  needs the network in ``read``. The TENTATIVE part of a range (buckets some input had not
  closed) is fetched live; for an input that is unreachable then, it contributes what the spool
  holds (nothing): the tentative result is computed from what is available, which is DPC's rule.
  The spool is shared by every query of a node (the serving query and a redo copy read the same
  immutable stable buckets) and trimmed in ``commit`` below the acknowledged bucket, the same
  one the producers trim at, so what a redo reads again stays (``ack_limit_file`` and
  ``first_tentative`` hold both). The spool directory must be visible to the executors: a local
  path is, in local mode (the fragments' deployment); a cluster would need a shared path.
  Without ``spool_dir`` the reader reads from the producers as before (stable ranges of a cut
  input then fail the batch).

Size: past 600 lines because everything here runs inside Spark's Python data source, in the
driver's planner process and in executor workers, where nothing of the agent is shared: the
reader's planning, DPC's release rule, replicated inputs, spools and the per-input tag must travel
together in one pickled reader. The pure parts (bucket splitting, widths) are functions at the top
and could move out; the reader itself is one object.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import logging
import os
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from app.availability.sunion import DelayStrategy, SUnion
from app.availability.tuples import Message
from app.dataplane.tokens import READ, Grant
from spark_jobs.runtime import follow, pace
from spark_jobs.runtime.dataplane import FileTokens, FixedToken, TokenSource
from spark_jobs.runtime.transport import BucketWidthMismatch, StreamClient

log = logging.getLogger(__name__)

KIND_COLUMN = "kind"
INPUT_COLUMN = "fedload_input"
# Failure backlog copied into the spool per trigger, after the buckets due now (see _fill_spool).
BACKLOG_BUCKETS_PER_CALL = 4
# What a cut link, a partition or a dead producer look like to a Flight client; a server-side
# error (FlightServerError: unknown stream, acknowledged data) is not among them on purpose.
UNREACHABLE = (
    flight.FlightUnavailableError,
    flight.FlightTimedOutError,
    flight.FlightCancelledError,
)
# What a source answering with an error looks like: a server-side failure, or a Python error in
# its handler mapped back (an unknown stream is a KeyError there, an ArrowKeyError here).
ANSWERED_WITH_ERROR = (flight.FlightError, pa.ArrowException)
# gRPC's default reconnect backoff grows to 120 s: after a long cut the channel would stay down
# long after the heal. A short cap makes the heal visible within a trigger or two.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.use_local_subchannel_pool", 1),
]


class TimedClient(StreamClient):
    """A StreamClient with a deadline on every call and a short reconnect backoff, so an
    unreachable input costs a bounded wait and a healed one is seen at once."""

    def __init__(self, location: str, timeout_s: float, **credentials: Any) -> None:
        super().__init__(
            location, timeout=timeout_s, channel_options=_CHANNEL_OPTIONS, **credentials
        )


# At most this many buckets of one input per log read when spooling (bounded reply size).
SPOOL_READ_BUCKETS = 64


def split_by_bucket(table: pa.Table, lo: int, hi: int, bucket_micros: int) -> dict[int, pa.Table]:
    """Rows of buckets [lo, hi) by bucket (of their stime), every bucket present, empty ones as
    empty tables of the same schema."""
    micros = table.column("stime").cast(pa.int64()).to_numpy() if table.num_rows else None
    if micros is None:
        return {b: table for b in range(lo, hi)}
    numbers = micros // bucket_micros
    if (numbers[1:] < numbers[:-1]).any():
        # A log answers in bucket order; sorted here all the same, stably, for any that doesn't.
        order = np.argsort(numbers, kind="stable")
        table, numbers = table.take(pa.array(order)), numbers[order]
    out = {}
    for b in range(lo, hi):
        first = int(np.searchsorted(numbers, b, side="left"))
        last = int(np.searchsorted(numbers, b, side="right"))
        out[b] = table.slice(first, last - first)
    return out


def same_width(info: dict[str, Any], bucket_ms: int, where: str) -> dict[str, Any]:
    """``info`` of the log at ``where`` if its buckets are ``bucket_ms`` wide (a log that does
    not say is taken as is). Read at another width, every bucket number would mean other rows:
    refused with what differs, before a single row is read."""
    width_us = info.get("bucket_us")
    if width_us is not None and int(width_us) != bucket_ms * 1000:
        raise BucketWidthMismatch.of(
            where, int(width_us), f"but this fragment reads {bucket_ms / 1000:g} s buckets"
        )
    return info


class Spool:
    """Complete buckets of the inputs, copied to local files by the driver (see the module
    docstring): ``<dir>/<location/stream, quoted>/<bucket>.arrow``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        # Folders known to exist: at 100 ms buckets a makedirs per put was a syscall per bucket.
        self._made: set[str] = set()

    def _folder(self, location: str, stream: str) -> str:
        return _spool_folder(self.directory, location, stream)

    def path(self, location: str, stream: str, bucket: int) -> str:
        return os.path.join(self._folder(location, stream), f"{bucket}.arrow")

    def has(self, location: str, stream: str, bucket: int) -> bool:
        return os.path.exists(self.path(location, stream, bucket))

    def buckets(self, location: str, stream: str) -> set[int]:
        """The input's spooled buckets, in one directory listing: a ``has`` per bucket cost a
        ``stat`` each, several per bucket and trigger at 100 ms buckets. A snapshot: a bucket
        spooled or trimmed after it is not in it (callers treat a bucket missing here as not
        spooled, which is what ``has`` answered a moment earlier too)."""
        try:
            names = os.listdir(self._folder(location, stream))
        except FileNotFoundError:
            return set()
        found = set()
        for name in names:
            stem = name.removesuffix(".arrow")
            # Temp files start with a dot and end .tmp: whole files only.
            if name.endswith(".arrow") and stem.lstrip("-").isdigit():
                found.add(int(stem))
        return found

    def put(self, location: str, stream: str, bucket: int, table: pa.Table) -> None:
        folder = self._folder(location, stream)
        if folder not in self._made:
            os.makedirs(folder, exist_ok=True)
            self._made.add(folder)
        final = self.path(location, stream, bucket)
        # A unique temp name: the serving query and a redo copy may spool the same bucket at
        # once; both write the same rows, and the rename makes either one whole.
        temp = os.path.join(folder, f".{bucket}.{uuid.uuid4().hex}.tmp")
        with pa.OSFile(temp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(temp, final)

    def get(self, location: str, stream: str, bucket: int) -> list[pa.RecordBatch]:
        with pa.memory_map(self.path(location, stream, bucket)) as source:
            return list(pa.ipc.open_file(source).read_all().to_batches())

    def trim(self, location: str, stream: str, below: int) -> None:
        folder = self._folder(location, stream)
        if not os.path.isdir(folder):
            return
        for name in os.listdir(folder):
            stem = name.removesuffix(".arrow")
            if name.endswith(".arrow") and stem.lstrip("-").isdigit() and int(stem) < below:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))


@functools.lru_cache(maxsize=256)
def _spool_folder(directory: str, location: str, stream: str) -> str:
    # Quoting the name cost more than the file's stat at 100 ms buckets: once per input.
    return os.path.join(directory, urllib.parse.quote(f"{location}/{stream}", safe=""))


# A coalesced batch grows to at most this many rows (a catch-up batch over a long backlog must
# not become one huge copy).
COALESCE_ROWS = 1 << 16


def coalesce(
    batches: Iterable[pa.RecordBatch], max_rows: int = COALESCE_ROWS
) -> Iterator[pa.RecordBatch]:
    """The same rows, in the same order, in fewer batches: runs of consecutive non-empty batches
    with one schema become one batch of at most ``max_rows`` rows (a batch bigger than that
    alone stays whole); empty batches are dropped. At 100 ms buckets a range held a spooled
    batch per bucket, and each one paid the conforming and Spark's per-batch handling."""
    run: list[pa.RecordBatch] = []
    rows = 0

    def flush() -> Iterator[pa.RecordBatch]:
        if len(run) == 1:
            yield run[0]
        elif run:
            yield pa.Table.from_batches(run).combine_chunks().to_batches()[0]

    for batch in batches:
        if not batch.num_rows:
            continue
        if run and (batch.schema != run[0].schema or rows + batch.num_rows > max_rows):
            yield from flush()
            run, rows = [], 0
        run.append(batch)
        rows += batch.num_rows
    yield from flush()


def checked_alternates(alternates: Any, where: str) -> list[dict[str, str]]:
    """``alternates`` if it is a list of ``{"location", "stream"}``; a ValueError naming
    ``where`` otherwise."""
    if not isinstance(alternates, list):
        raise ValueError(f"SUnion: {where}: expected a list, got {alternates!r}")
    for alternate in alternates:
        if not isinstance(alternate, dict) or set(alternate) != {"location", "stream"}:
            raise ValueError(
                f"SUnion: {where}: each needs exactly 'location' and 'stream', got {alternate!r}"
            )
    return alternates


def _tagged(batch: pa.RecordBatch, index: int, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``target``'s columns by name, tagged with its input's index; a column this
    input lacks (another input's) is null."""
    have = set(batch.schema.names)
    columns = [
        pa.array(np.full(batch.num_rows, index, dtype=np.int32), type=field.type)
        if field.name == INPUT_COLUMN
        else batch.column(field.name).cast(field.type)
        if field.name in have
        else pa.nulls(batch.num_rows, field.type)
        for field in target
    ]
    return pa.RecordBatch.from_arrays(columns, schema=target)


@dataclass(frozen=True)
class BucketRange(InputPartition):
    """One input's buckets [lo, hi) in one micro-batch: one Spark task."""

    location: str
    stream: str
    lo: int
    hi: int
    # DPC: buckets from here on were released without every input's boundary.
    tentative_from: int | None = None
    # The read token, minted when the batch was planned: an executor on a cluster shares no
    # file with the agent, so the token travels with the partition.
    token: str | None = None
    # A replicated input: the source whose log holds the range (when the batch was planned),
    # read instead of ``location``/``stream``, which then only name the input (its spool).
    source: tuple[str, str] | None = None
    # The input's place in ``inputs`` (the value of INPUT_COLUMN for its rows).
    index: int = 0


class SUnionDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sunion"

    def schema(self) -> str:
        # Fragments always pass their input schema with .schema(); this is only reached if not.
        return str(self.options["schema"])

    def streamReader(self, schema: StructType) -> SUnionReader:
        return SUnionReader(dict(self.options), schema)


class SUnionReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.inputs: list[dict[str, Any]] = json.loads(options["inputs"])
        if not self.inputs:
            raise ValueError("SUnion needs at least one input stream")
        for n, i in enumerate(self.inputs):
            checked_alternates(i.get("alternates", []), f"inputs[{n}].alternates")
        # The inputs' alternates as the agent lists them now (``alternates_file``): re-read
        # when the file changes, so a copy placed after the query started is read too.
        self.alternates_file = options.get("alternates_file")
        self._alternates_seen: int | None = None
        self.consumer = options["consumer"]
        self.start_bucket = int(options["start_bucket"]) if "start_bucket" in options else None
        self.max_buckets = int(options.get("max_buckets_per_batch", "0")) or None
        self.schema = schema
        self._clients: dict[str, StreamClient] = {}
        budget = options.get("delay_budget_ms")
        self.delay_budget_ms = int(budget) if budget is not None else None
        self.bucket_ms = int(options.get("bucket_ms", "1000"))
        self.strategy = DelayStrategy(options.get("delay_strategy", DelayStrategy.DELAY_EACH))
        self.clock_location = options.get("clock_location")
        self.clock_stream = options.get("clock_stream")
        self.clock_offset_ms = int(options.get("clock_offset_ms", "0"))
        if (self.clock_location is None) != (self.clock_stream is None):
            raise ValueError("SUnion: clock_location and clock_stream go together")
        # First bucket this reader released tentatively: the reader is in failure from then on
        # (a new reader, after reconciliation restarts the query, starts stable again).
        self._first_tentative: int | None = (
            int(options["first_tentative"]) if "first_tentative" in options else None
        )
        self.ack_limit_file = options.get("ack_limit_file")
        self.budget_file = options.get("budget_file")
        self.pause_file = options.get("pause_file")
        self.stable_only_file = options.get("stable_only_file")
        self.follow_file = options.get("follow_file")
        self.pace_file = options.get("pace_file")
        self.hold_healed = options.get("hold_healed", "true") == "true"
        self.call_timeout_s = self._positive_ms(options, "call_timeout_ms", 1000) / 1000
        self.info_timeout_s = self._positive_ms(options, "info_timeout_ms", 250) / 1000
        spool_dir = options.get("spool_dir")
        self.spool = Spool(spool_dir) if spool_dir else None
        # The agent's data-plane credentials (spark_jobs.runtime.dataplane): its tokens, spilled
        # to a file it keeps fresh, and the certificates it trusts for grpc+tls endpoints.
        token_file = options.get("token_file")
        self.tokens = FileTokens(token_file) if token_file else None
        # Read here, on the driver's machine: the bytes travel to the executors with the reader.
        roots_file = options.get("tls_roots_file")
        self.tls_roots = Path(roots_file).read_bytes() if roots_file else None
        # Per input (location/stream): the last info it answered (kept while it is unreachable)
        # and one past the last bucket known to be in the spool.
        self._known: dict[str, dict[str, Any]] = {}
        self._frontier: dict[str, int] = {}
        # Per source (location/stream): the last bucket acknowledged there (``commit``).
        self._acked: dict[str, int] = {}
        self._last_now_ms = 0
        # Locations that failed a call, each with a thread probing it until it answers. While a
        # location is suspect nothing calls it on the planning path: a partition is silence, and
        # waiting for the deadline on every trigger would add it to every tentative release.
        self._suspects: dict[str, threading.Thread] = {}
        self._stopped = False

    @staticmethod
    def _positive_ms(options: dict[str, str], name: str, default: int) -> int:
        raw = options.get(name, str(default))
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value <= 0:
            raise ValueError(f"SUnion: {name} must be a positive number of ms, got {raw!r}")
        return value

    def __getstate__(self) -> dict[str, Any]:
        # gRPC channels and threads cannot be pickled; executors open their own in read().
        state = dict(self.__dict__)
        state["_clients"] = {}
        state["_suspects"] = {}
        return state

    def _credentials(self, token: str | None = None) -> dict[str, Any]:
        tokens: TokenSource | None = FixedToken(token) if token is not None else self.tokens
        return {"tokens": tokens, "tls_roots": self.tls_roots}

    def _client(self, location: str) -> StreamClient:
        if location not in self._clients:
            self._clients[location] = TimedClient(
                location, self.call_timeout_s, **self._credentials()
            )
        return self._clients[location]

    def _drop(self, location: str, stream: str) -> None:
        """A call to ``location`` failed in transport: a fresh channel next time (it connects at
        once after a heal), and the location is suspect until a probe of ``stream`` answers."""
        client = self._clients.pop(location, None)
        if client is not None:
            client.close()
        if location not in self._suspects and not self._stopped:
            probe = threading.Thread(
                target=self._probe, args=(location, stream), name=f"sunion-probe:{location}"
            )
            probe.daemon = True
            self._suspects[location] = probe
            probe.start()

    def _probe(self, location: str, stream: str) -> None:
        while not self._stopped:
            client = TimedClient(location, self.call_timeout_s, **self._credentials())
            try:
                client.info(stream)
                break
            except UNREACHABLE:
                time.sleep(0.1)
            except flight.FlightError:
                # It answers, with an error: the planning path's own call will raise it.
                break
            finally:
                client.close()
        # One dict operation, atomic under the GIL: the planning thread sees it or not.
        self._suspects.pop(location, None)

    def reachable(self, location: str) -> bool:
        """False while calls to ``location`` failed and no probe has heard from it since."""
        return location not in self._suspects

    @staticmethod
    def _key(i: dict[str, Any]) -> str:
        return f"{i['location']}/{i['stream']}"

    @staticmethod
    def _sources(i: dict[str, Any]) -> list[tuple[str, str]]:
        """Where input ``i`` can be read: its primary, then its alternates, in that order."""
        return [
            (i["location"], i["stream"]),
            *((a["location"], a["stream"]) for a in i.get("alternates", [])),
        ]

    @staticmethod
    def _is_primary(i: dict[str, Any], location: str, stream: str) -> bool:
        """Whether (location, stream) is the input's own log: its errors fail the query, as an
        unreplicated input's do, while an alternate's only make it no source for now."""
        return (location, stream) == (i["location"], i["stream"])

    def _info(self, i: dict[str, Any]) -> dict[str, Any]:
        """The input's info, or the last one it gave while it is unreachable ("no news"); for a
        replicated input, the furthest boundary any of its sources reported."""
        if not i.get("alternates"):
            return self._source_info(i["location"], i["stream"], replicated=False)
        infos = [
            self._source_info(*source, replicated=True, alternate=not self._is_primary(i, *source))
            for source in self._sources(i)
        ]
        boundaries = [info["boundary"] for info in infos if info["boundary"] is not None]
        firsts = [info["first"] for info in infos if info["first"] is not None]
        return {
            "boundary": max(boundaries) if boundaries else None,
            "first": min(firsts) if firsts else None,
        }

    def _source_info(
        self, location: str, stream: str, *, replicated: bool, alternate: bool = False
    ) -> dict[str, Any]:
        key = f"{location}/{stream}"
        if self.delay_budget_ms is None and not replicated:
            # Without DPC nothing is released on a deadline, so "no news" buys nothing and
            # costs correctness: Spark's processAllAvailable took a late answer on a busy
            # machine for "no more data", and a stopped fragment missed its last rows (demo).
            # The stable path waits for the producer, as it always did. (A replicated input
            # cannot: a cut primary would hold back what its copies already have.)
            blocking = f"blocking:{location}"
            if blocking not in self._clients:
                self._clients[blocking] = StreamClient(location, **self._credentials())
            self._known[key] = same_width(self._clients[blocking].info(stream), self.bucket_ms, key)
            return self._known[key]
        if self.reachable(location):
            # The one call every trigger makes on the planning path, a few bytes each way: its
            # own short deadline, because the first trigger after a silent cut waits for it in
            # full (1 s with call_timeout_ms, measured as latestOffset in Spark's progress) and
            # that wait adds to the bucket's latency against X. A healthy answer that misses it
            # costs one trigger of "no news" while the probe clears the suspicion. Without DPC
            # (a replicated input) nothing waits on X: the longer read deadline.
            planning = f"info:{location}"
            if planning not in self._clients:
                dpc = self.delay_budget_ms is not None
                timeout = self.info_timeout_s if dpc else self.call_timeout_s
                self._clients[planning] = TimedClient(location, timeout, **self._credentials())
            try:
                self._known[key] = same_width(
                    self._clients[planning].info(stream), self.bucket_ms, key
                )
            except UNREACHABLE:
                self._clients.pop(planning).close()
                self._drop(location, stream)
            except ANSWERED_WITH_ERROR:
                if not alternate:
                    raise
                # An alternate that cannot give the stream (its copy has not begun its log, or
                # it holds the replica no more) is no source for now; asked again next trigger.
                self._known.pop(key, None)
        return self._known.get(key, {"boundary": None, "first": None})

    def _infos(self) -> list[dict[str, Any]]:
        return [self._info(i) for i in self.inputs]

    def _boundaries(self, begin: int) -> list[int | None]:
        """What the release rules may count as complete per input: its boundary, or with a
        spool its spool frontier (complete buckets are copied here first, so a stable release
        never depends on the producer being reachable when the batch is read)."""
        infos = self._infos()
        if self.spool is None:
            return [info["boundary"] for info in infos]
        return [
            self._fill_spool(i, info["boundary"], begin)
            for i, info in zip(self.inputs, infos, strict=True)
        ]

    def _fill_spool(self, i: dict[str, Any], boundary: int | None, begin: int) -> int | None:
        assert self.spool is not None
        if boundary is None:
            return None
        key = self._key(i)
        # Bounded: a replay far behind spools a few batches ahead, not the whole backlog.
        ahead = (self.max_buckets or 16) * 4
        # The release rules wait only for the buckets from where this query stands.
        start = max(begin, self._frontier.get(key, begin))
        frontier = self._spool_range(i, start, min(boundary, start + ahead))
        self._frontier[key] = frontier
        if self._first_tentative is not None and self._first_tentative < begin:
            # In failure the redo reads [first tentative, begin) again, stably, and should find
            # it here even if the link is cut again before it runs. That backlog is copied
            # after the buckets this query needs now and a few at a time: copied first and
            # whole, it held new buckets back at the heal of a 60 s failure (3.67 s, X = 3 s).
            backlog = f"{key}#backlog"
            low = max(self._first_tentative, self._frontier.get(backlog, self._first_tentative))
            high = min(begin, boundary, low + BACKLOG_BUCKETS_PER_CALL)
            self._frontier[backlog] = self._spool_range(i, low, high)
        return frontier

    def _spool_range(self, i: dict[str, Any], bucket: int, upto: int) -> int:
        """Copy input ``i``'s buckets [bucket, upto) into the spool; returns the first one not
        there (where a cut or the end stopped it)."""
        assert self.spool is not None
        location, stream = i["location"], i["stream"]  # the input's, whichever source gives it
        # One listing per call, not a stat per bucket (what this call puts is added to it).
        spooled = self.spool.buckets(location, stream) if bucket < upto else set()
        while bucket < upto:
            if bucket in spooled:
                bucket += 1
                continue
            # The run of buckets not spooled yet, in one call: a call per bucket cost a Flight
            # round trip each, and at 100 ms buckets a start-up backlog of three inputs took
            # seconds of latestOffset, during which nothing was released (the copies went
            # tentative at start-up).
            end = bucket + 1
            while end < upto and end - bucket < SPOOL_READ_BUCKETS and end not in spooled:
                end += 1
            tables = self._read_complete_range(i, bucket, end) if end > bucket + 1 else None
            if tables is None:
                # One bucket at a time: no single source may hold the whole run (a cut primary,
                # a copy behind it).
                table = self._read_complete(i, bucket)
                if table is None:
                    break
                tables = {bucket: table}
            for number, table in tables.items():
                self.spool.put(location, stream, number, table)
                spooled.add(number)
            bucket += len(tables)
        return bucket

    def _read_complete_range(
        self, i: dict[str, Any], lo: int, hi: int
    ) -> dict[int, pa.Table] | None:
        """Input ``i``'s buckets [lo, hi), each its own table (empty ones too), from the first
        reachable source whose log holds them all complete; None when none does now."""
        for location, stream in self._holding(i, hi):
            try:
                table = self._client(location).read(stream, lo, hi).read_all()
            except UNREACHABLE:
                self._drop(location, stream)
                continue
            except ANSWERED_WITH_ERROR:
                if self._is_primary(i, location, stream):
                    raise
                continue
            return split_by_bucket(table, lo, hi, self.bucket_ms * 1000)
        return None

    def _read_complete(self, i: dict[str, Any], bucket: int) -> pa.Table | None:
        """Input ``i``'s bucket from the first reachable source whose log holds it complete;
        None when none can give it now."""
        for location, stream in self._holding(i, bucket + 1):
            try:
                return self._client(location).read(stream, bucket, bucket + 1).read_all()
            except UNREACHABLE:
                self._drop(location, stream)
            except ANSWERED_WITH_ERROR:
                if self._is_primary(i, location, stream):
                    raise
        return None

    def _holding(self, i: dict[str, Any], upto: int) -> list[tuple[str, str]]:
        """Input ``i``'s reachable sources whose logs hold every bucket below ``upto`` (as they
        last reported), the primary first. Unreplicated: the primary if reachable (its own
        boundary is what asked for the range)."""
        if not i.get("alternates"):
            return [(i["location"], i["stream"])] if self.reachable(i["location"]) else []
        holding = []
        for location, stream in self._sources(i):
            boundary = self._known.get(f"{location}/{stream}", {}).get("boundary")
            if self.reachable(location) and boundary is not None and boundary >= upto:
                holding.append((location, stream))
        return holding

    def initialOffset(self) -> dict[str, int]:
        # A fresh query (no checkpoint) starts at the replay point, else at the oldest bucket
        # any input still holds; a restarted query never calls this (Spark uses its offset log).
        if self.start_bucket is not None:
            return {"bucket": self.start_bucket}
        # Every input must answer here (no deadline, no "last known"): starting from a partial
        # view would start past rows of the input that did not answer.
        infos = [self._first_answer(i) for i in self.inputs]
        firsts = [info["first"] for info in infos if info["first"] is not None]
        boundaries = [info["boundary"] for info in infos if info["boundary"] is not None]
        candidates = firsts or boundaries
        return {"bucket": min(candidates) if candidates else 0}

    def _first_answer(self, i: dict[str, Any]) -> dict[str, Any]:
        """The info of the input's first source to answer (a replicated input's primary may be
        cut off); the primary, however long it takes, when none does."""
        if i.get("alternates"):
            for location, stream in self._sources(i):
                timed = TimedClient(location, self.call_timeout_s, **self._credentials())
                try:
                    return same_width(timed.info(stream), self.bucket_ms, f"{location}/{stream}")
                except UNREACHABLE:
                    continue
                except ANSWERED_WITH_ERROR:
                    if self._is_primary(i, location, stream):
                        raise
                    continue  # an alternate without the stream (yet)
                finally:
                    timed.close()
        with StreamClient(i["location"], **self._credentials()) as client:
            where = f"{i['location']}/{i['stream']}"
            return same_width(client.info(i["stream"]), self.bucket_ms, where)

    def _now_ms(self) -> int:
        if self.clock_location is not None and self.clock_stream is not None:
            if not self.reachable(self.clock_location):
                return self._last_now_ms
            try:
                boundary = self._client(self.clock_location).info(self.clock_stream)["boundary"]
            except UNREACHABLE:
                # An unreachable clock stands still: nothing becomes due early.
                self._drop(self.clock_location, self.clock_stream)
                return self._last_now_ms
            self._last_now_ms = int(boundary) if boundary is not None else 0
            return self._last_now_ms
        return int(time.time() * 1000) - self.clock_offset_ms

    def _dpc_offset(self, start: dict[str, int] | None) -> Any:
        # The bucket rules are app.availability.sunion's; this only feeds it the boundaries
        # (rows stay in the logs or the spool, read by executors) and asks it which buckets may
        # go now.
        assert self.delay_budget_ms is not None
        budget_ms = self._budget_ms(self.delay_budget_ms)
        begin = start["bucket"] if start else self.initialOffset()["bucket"]
        boundaries = self._boundaries(begin)
        names = [f"{i['location']}/{i['stream']}" for i in self.inputs]
        rules = SUnion(
            names,
            bucket_ms=self.bucket_ms,
            delay_budget_ms=budget_ms,
            strategy=self.strategy,
            start_bucket=begin,
        )
        for name, boundary in zip(names, boundaries, strict=True):
            if boundary is not None:
                rules.receive(name, Message.boundary(boundary * self.bucket_ms))
        now = self._now_ms()
        limit = begin + self.max_buckets if self.max_buckets is not None else None
        tentative_from: int | None = None
        stable_only = self.stable_only_file is not None and os.path.exists(self.stable_only_file)
        while limit is None or rules.next_bucket < limit:
            if stable_only and not rules.stable_ready(rules.next_bucket):
                break
            if (
                self.hold_healed
                and self._healed(rules)
                and now < rules.due_at(rules.next_bucket) + budget_ms
            ):
                # Healed while in failure: reconciliation will redo these buckets stably, so
                # processing them now would only add tentative rows to correct (DPCNode does the
                # same). A bucket whose deadline passes before the redo still goes, tentatively.
                break
            bucket = rules.release(now, in_failure=self._first_tentative is not None)
            if bucket is None:
                break
            if not bucket.stable and tentative_from is None:
                tentative_from = bucket.number
                if self._first_tentative is None:
                    self._first_tentative = bucket.number
        end = rules.next_bucket
        if end == begin and start is not None:
            # Spark sees "no new data" only when the offset is equal to the start, extras too.
            return start
        offset: dict[str, int] = {"bucket": end}
        if tentative_from is not None:
            offset["tentative_from"] = tentative_from
        return offset

    def _refresh_alternates(self) -> None:
        """Take the inputs' alternates from ``alternates_file`` when it changed since the last
        trigger: one ``stat`` per trigger otherwise. Planning only: the partitions carry the
        source each range is read from, so the executors' copies need no update."""
        if self.alternates_file is None:
            return
        try:
            changed = os.stat(self.alternates_file).st_mtime_ns
        except FileNotFoundError:
            return  # the agent has not listed any: the ``inputs`` option's stand
        if changed == self._alternates_seen:
            return
        self._alternates_seen = changed
        try:
            with open(self.alternates_file) as file:
                listed = json.load(file)
            if not isinstance(listed, dict):
                raise ValueError(f"expected an object of input -> alternates, got {listed!r}")
            # An input the file does not name keeps its alternates: a copy (DPC's redo) may
            # start before its fragment has rewritten a file an earlier run left.
            found = {
                key: checked_alternates(listed[key], f"{self.alternates_file}: {key}")
                for key in map(self._key, self.inputs)
                if key in listed
            }
        except (OSError, ValueError) as error:
            # The agent writes the file whole (os.replace), so this is a bug, not a race: keep
            # reading the sources known so far rather than stop the fragment over it.
            log.error("SUnion %s: alternates not updated: %s", self.consumer, error)
            return
        for i in self.inputs:
            i["alternates"] = found.get(self._key(i), i.get("alternates", []))

    def _healed(self, rules: SUnion) -> bool:
        first = self._first_tentative
        return first is not None and all(
            rules.stable_ready(b) for b in range(first, rules.next_bucket + 1)
        )

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        self._refresh_alternates()
        if start is not None and self.pause_file is not None and os.path.exists(self.pause_file):
            # Paused (a redo yielding to the serving query): "no new data" is an offset equal
            # to the start. Not on the first call: Spark needs one offset to begin from.
            return start
        if start is not None and self.follow_file is not None:
            # A warm copy plans the source's batches, not its own (spark_jobs.runtime.follow).
            followed = follow.planned_end(self.follow_file, int(start["bucket"]))
            if followed is not None:
                return {"bucket": followed}
        if start is not None and self.pace_file is not None and pace.holds(self.pace_file):
            # The source of a warm hand-off waits for its copy (spark_jobs.runtime.pace).
            return start
        if self.delay_budget_ms is not None:
            result: dict[str, int] = self._dpc_offset(start)
            return result
        # Stable path: a bucket is released when every input's boundary has passed it. An input
        # that never sent a boundary holds everything back (DPC's tentative path would release
        # after the delay budget instead; not done here).
        begin = start["bucket"] if start else self.initialOffset()["bucket"]
        boundaries = self._boundaries(begin)
        known = [b for b in boundaries if b is not None]
        if len(known) < len(boundaries):
            return {"bucket": begin}
        end = max(begin, min(known))
        if self.max_buckets is not None:
            end = min(end, begin + self.max_buckets)
        return {"bucket": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[BucketRange]:
        lo, hi = start["bucket"], end["bucket"]
        if lo >= hi:
            return []
        tentative = end.get("tentative_from")
        return [
            replace(self._range(i, lo, hi, tentative), index=n) for n, i in enumerate(self.inputs)
        ]

    def _range(self, i: dict[str, Any], lo: int, hi: int, tentative: int | None) -> BucketRange:
        if not i.get("alternates"):
            token = self._read_token(i["location"], i["stream"])
            return BucketRange(i["location"], i["stream"], lo, hi, tentative, token)
        # Read from a source that holds the range's stable part complete (one did: the input's
        # boundary is its sources' furthest); the tentative part, from what it has.
        stable_hi = hi if tentative is None else max(lo, tentative)
        reachable = [s for s in self._sources(i) if self.reachable(s[0])]
        location, stream = (self._holding(i, stable_hi) or reachable or self._sources(i))[0]
        return BucketRange(
            i["location"],
            i["stream"],
            lo,
            hi,
            tentative,
            self._read_token(location, stream),
            source=(location, stream),
        )

    def _read_token(self, location: str, stream: str) -> str | None:
        if self.tokens is None:
            return None
        return self.tokens.token(location, Grant(frozenset({READ}), stream=stream))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketRange)
        # Spark checks Arrow batches from read() against the declared schema exactly, nullability
        # included: a stream written by SOutput (Spark's toArrow marks every field nullable) would
        # be refused by a reader declaring non-null fields, so conform each batch. Timestamps are
        # UTC throughout (the session time zone and the generator agree).
        target = to_arrow_schema(self.schema, timezone="UTC")
        kinded = KIND_COLUMN in target.names
        for batch in coalesce(self._batches(partition)):
            yield self._conform(batch, partition, target, kinded)

    def _conform(
        self, batch: pa.RecordBatch, partition: BucketRange, target: pa.Schema, kinded: bool
    ) -> pa.RecordBatch:
        if kinded and KIND_COLUMN not in batch.schema.names:
            batch = self._with_kind(batch, partition)
        if INPUT_COLUMN in target.names:
            return _tagged(batch, partition.index, target)
        if batch.schema == target:
            return batch
        # With a kind column, match by name (it was appended last here).
        columns = [batch.column(field.name) for field in target] if kinded else batch.columns
        return pa.RecordBatch.from_arrays(
            [column.cast(field.type) for column, field in zip(columns, target, strict=True)],
            schema=target,
        )

    def _batches(self, partition: BucketRange) -> Iterator[pa.RecordBatch]:
        """The range's rows in bucket order: spooled buckets from the spool, runs of the others
        from the producer (a fresh client per task: read() runs in executor workers on a
        pickled copy). An unreachable producer is tolerated only for a tentative run."""
        spool, lo, hi = self.spool, partition.lo, partition.hi
        # Listed once: the driver spooled the range's stable part before planning the batch.
        spooled = spool.buckets(partition.location, partition.stream) if spool else set()
        # The next spooled bucket is looked up, not stepped to: a query started over an empty
        # log plans its first range from bucket 0 to the wall clock's (~1.8e9 one-second
        # buckets), and stepping through them took a minute and a half of a core.
        ordered = sorted(spooled)
        bucket = lo
        while bucket < hi:
            if spool is not None and bucket in spooled:
                yield from spool.get(partition.location, partition.stream, bucket)
                bucket += 1
                continue
            after = bisect.bisect_right(ordered, bucket)
            end = min(hi, ordered[after]) if after < len(ordered) else hi
            yield from self._live(partition, bucket, end)
            bucket = end

    def _live(self, partition: BucketRange, lo: int, hi: int) -> list[pa.RecordBatch]:
        first = partition.tentative_from
        tentative = first is not None and lo >= first
        # A stable run must be read whatever it costs (no deadline: on a busy machine a short
        # one fails healthy reads); a tentative run must not wait for a cut input.
        credentials = self._credentials(partition.token)
        location, stream = partition.source or (partition.location, partition.stream)
        client = (
            TimedClient(location, self.call_timeout_s, **credentials)
            if tentative
            else StreamClient(location, **credentials)
        )
        try:
            # Whole or nothing: a cut in the middle of the stream must not leave half a run.
            return [chunk.data for chunk in client.read(stream, lo, hi)]
        except UNREACHABLE:
            if tentative:
                # Tentative: computed from what is available, and this input is not.
                return []
            raise
        finally:
            client.close()

    def _with_kind(self, batch: pa.RecordBatch, partition: BucketRange) -> pa.RecordBatch:
        micros = batch.column("stime").cast(pa.int64()).to_numpy()
        if partition.tentative_from is None:
            tentative = np.zeros(len(micros), dtype=bool)
        else:
            tentative = micros // (self.bucket_ms * 1000) >= partition.tentative_from
        kinds = pa.array(np.where(tentative, "TENTATIVE", "STABLE"), type=pa.string())
        return pa.RecordBatch.from_arrays(
            [*batch.columns, kinds], names=[*batch.schema.names, KIND_COLUMN]
        )

    def commit(self, end: dict[str, int]) -> None:
        # Spark has durably committed every batch up to ``end``: the producers may trim their
        # logs below it. Acknowledging later than this would only cost memory; earlier would
        # lose rows that a restart from the checkpoint must re-read.
        # DPC: buckets released tentatively must stay in the logs, because reconciliation
        # restores the checkpoint taken before the first of them and reads them again.
        bucket = end["bucket"]
        if self._first_tentative is not None:
            bucket = min(bucket, self._first_tentative)
        limit = self._ack_limit()
        if limit is not None:
            bucket = min(bucket, limit)
        for i in self.inputs:
            # Every source keeps what this fragment may read again, so every source is told.
            for location, stream in self._sources(i):
                # Acknowledgements only grow: a later commit sends a later one after the heal.
                ack = self._source_ack(location, stream, bucket)
                if ack is not None and self.reachable(location):
                    try:
                        self._client(location).ack(stream, self.consumer, ack)
                        self._acked[f"{location}/{stream}"] = ack
                    except UNREACHABLE:
                        self._drop(location, stream)
                    except ANSWERED_WITH_ERROR:
                        if self._is_primary(i, location, stream):
                            raise
                        # An alternate without the stream keeps nothing for us to trim.
            if self.spool is not None:
                # The spool keeps what the producers keep: a redo reads it again.
                self.spool.trim(i["location"], i["stream"], bucket)

    def _source_ack(self, location: str, stream: str, bucket: int) -> int | None:
        """What to acknowledge at one source of an input whose buckets below ``bucket`` are
        consumed: no more than the source's last known boundary (the buckets below it are all
        it has complete; an ack past it would trim what its writer appends there later, and
        move the log's ``first`` back down). None: do not acknowledge there (no boundary known,
        or below what it was sent before: acknowledgements only grow)."""
        key = f"{location}/{stream}"
        boundary = self._known.get(key, {}).get("boundary")
        if boundary is None:
            return None
        ack = min(bucket, int(boundary))
        before = self._acked.get(key)
        return None if before is not None and ack < before else ack

    def _budget_ms(self, default: int) -> int:
        # Written by the node's poller from the measured batch time (DPCSettings.adaptive_budget).
        if self.budget_file is None:
            return default
        try:
            with open(self.budget_file) as file:
                return int(file.read())
        except FileNotFoundError:
            return default

    def _ack_limit(self) -> int | None:
        if self.ack_limit_file is None:
            return None
        try:
            with open(self.ack_limit_file) as file:
                return int(file.read())
        except FileNotFoundError:
            return None

    def stop(self) -> None:
        self._stopped = True
        for client in self._clients.values():
            client.close()
        self._clients.clear()
