"""Warm hand-off: a load move through a warm copy at the target (active standby used for a move).

A stop-and-copy move (``movement.relocate``) leaves the fragment down from the source's stop to
the first batch of a query started cold at the target, and a cold start is most of that (the
SUnion data source's Python worker, the state store's first load, the first batch's plan: 2-3 s
against a 0.3-0.5 s batch on a running query). A Spark restart pays the same, so a stop-and-copy
move can only approach it. Here the target pays the cold start while the source still runs:

1. prepare: the registry's prepared movement (the accepted offer), as in ``relocate``.
2. warming: the target asks the source for a live snapshot of the checkpoint (``warm`` action,
   checked against the registry like a release); the source holds its inputs for the copy
   (consumer ``<fragment>.warm-<movement>``) first, so nothing the copy will read is trimmed. The
   target installs the snapshot and starts the query from it with a ``WarmSink`` and a follow
   file (``spark_jobs.runtime.follow``): the copy runs exactly the source's batches (same ids,
   same buckets), and drops their output, which the source wrote.
3. warmed: the target polls the source's offset log (``offsets`` action) into the follow file
   until the copy has committed the source's last committed batch. A copy that waits idle
   ``JUMP_MIN_BEHIND`` or more batches behind (its first, cold batch leaves it there) runs the
   source's batches up to the second-to-last logged as one batch of its own, then the rest one
   by one: from then on its batch ids are the source's minus a shift, which the target keeps
   (``WarmCopy.segments``) and, at the release, writes into the checkpoint (``soutput.Mirror``)
   with the movement's epoch as the output namespace for the copy's own batches.
4. release: the source stops after its last committed batch and ships its final checkpoint, as in
   a stop-and-copy move; the target checks that the copy's batches are the source's.
5. commit: the registry makes the target the host (the single truth, as for every move); the
   output log is fenced at the new epoch.
6. switch: the sink writes from now on and the copy plans its own batches after the source's last
   one; the source retires its copy. A batch the copy writes that the source wrote too (the same
   ids and buckets from the same state) is kept once by the output log.

Exactly one host's output counts at every instant: before the commit the copy writes nothing
and drops only batches the source committed (``WarmSink``), after it the source is stopped and
fenced, and a batch id never covers different buckets at the two hosts. Anything wrong before
the release (no snapshot, the copy fails or does not catch up within the budget) falls back to
the stop-and-copy move; a copy whose batches differ from the source's after the release
finishes as a stop-and-copy move from the source's final checkpoint; a source that dies aborts
the movement, as in a stop-and-copy move. A target that dies after the commit restarts from the
copy's checkpoint and follow file, so it runs the source's batches before its own.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from app.dataplane.tokens import RELEASE, Grant
from spark_jobs.runtime import follow, pace
from spark_jobs.runtime.checkpoint_tree import Tree, unpack_tree
from spark_jobs.runtime.coordinator import MovementCoordinator, PreparedMove
from spark_jobs.runtime.host import HOLD_TIMEOUT_S, FragmentRuntime, FragmentSpec
from spark_jobs.runtime.movement import (
    MoveAborted,
    MoveInDoubt,
    Relocation,
    RemoteHost,
    _committed,
    relocate,
)
from spark_jobs.runtime.soutput import Mirror, SOutput, write_mirror, write_namespace
from spark_jobs.runtime.standby import snapshot_running
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient

log = logging.getLogger(__name__)

# Seconds a warm copy may take to catch up before the move falls back to stop-and-copy. The
# copy costs no downtime while it catches up (the source runs on, paced), so the suggested budget
# is generous; it is always bounded by the prepared movement's lease, less
# ``LEASE_RESERVE_FRACTION`` of it for the release, the shipping, the commit and a fallback
# (``lease_deadline``): a budget longer than the lease used to end in aborted movements. 0, the
# default, turns the warm hand-off off: it beats a restart on 2-core machines that are not
# overloaded (gap ratio 0.83, 0.89-0.95; stop-and-copy 1.09 in the same hour), but on an
# overloaded one the copy's cold first batch, competing with the source, took longer than any
# lease allows and every move fell back (bench/agents/README.md); and the process tests and the
# demo, which move fragments by stop-and-copy, would each have to choose before it is the default.
WARM_BUDGET_ENV = "FEDLOAD_WARM_BUDGET_S"
DEFAULT_WARM_BUDGET_S = 0.0
SUGGESTED_WARM_BUDGET_S = 30.0
# Part of the movement's lease kept, after the copy's catch-up, for the release, the shipping,
# the commit and a stop-and-copy fallback (at least ``LEASE_RESERVE_MIN_S``).
LEASE_RESERVE_FRACTION = 0.3
LEASE_RESERVE_MIN_S = 5.0
# How often the target reads the source's offset log while the copy follows.
FOLLOW_POLL_S = 0.1
# The copy's trigger interval. At the fragment's own (0.5 s) it could never catch up: the
# source runs a data batch and then a no-data batch (the watermark moved) every second, one per
# trigger, and the copy has to run each of them too. It keeps this interval after the switch,
# until its next restart: a trigger checks the inputs' boundaries, a few small calls.
COPY_TRIGGER_S = 0.1
# Batches the copy may still be behind the source at the release, once half the budget is gone:
# it runs them after the release, warm (a few tenths of a second each, against 2-3 s for a cold
# start). On a busy machine the source has no idle time between its batches and a copy that
# costs what the source costs per batch does not gain on it.
MAX_LAG_BATCHES = 3
# Before that, from half to three quarters of the budget, one batch behind will do: the copy has
# the batch after its last committed one planned already, so one behind is the batch it is
# running. Released at three behind, it ran three batches after every release on a loaded
# machine (2026-11-26 20:38-20:46: 2.4-3.9 s from the switch to its first write, about a
# restart's 3.2-3.8 s); with jumps it falls back to one behind now and then.
CLOSE_LAG_BATCHES = 1
# Batches a copy that runs warm (it has committed a batch of its own past the snapshot) may still
# be behind at the end of the budget and be used all the same. On a quiet 2-core machine
# (2026-11-26, bench/agents/README.md) the copy followed 4-5 batches behind the source for the
# whole budget: both queries share the cores, so it gains on the source only slowly. After the
# release the source is stopped and the copy runs those batches alone, 0.2-0.4 s each, while a
# cold start (the stop-and-copy fallback) costs 3-4 s: about 8-10 such batches.
MAX_LAG_AT_DEADLINE = 8
# A copy that waits, idle, this many of the source's batches behind runs all but the source's
# last logged batch as one batch of its own (a jump), then the last one as the source ran it.
# Mirroring batch by batch, a copy gains on the source only the source's idle time, and its
# first (cold) batch alone leaves it 4-10 batches behind (bench/agents/README.md). After the jump
# its state is the source's again from the next batch on: the watermark that batch uses is
# computed from the same rows, so it evicts the same windows. Assumes no row is ever late at the
# source (the jump batch plans with an older watermark, so it would keep a row the source
# dropped): true of the catalogue's fragments, which read their inputs in bucket order with
# event times inside each bucket. Two, not more: a jump costs what one batch costs, and a copy
# that mirrors batch by batch on shared cores never gains on the source, so at 3 it followed
# exactly 3 behind for the whole budget and ran those 3 after the release, each as slow as the
# source's (2026-11-26 20:10-20:27, load 12: 1.3 s a batch, move gap 5.2 s against a restart's
# 4.7 s). At 2 it jumps whenever it falls 2 behind, so it stays within one batch.
JUMP_MIN_BEHIND = 2
JUMP_ENV = "FEDLOAD_WARM_JUMP"
# An acknowledgement above every bucket: a hold that no longer holds anything.
RELEASED_HOLD = 2**62


def warm_budget() -> float:
    raw = os.environ.get(WARM_BUDGET_ENV, str(DEFAULT_WARM_BUDGET_S))
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{WARM_BUDGET_ENV} must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{WARM_BUDGET_ENV} must be >= 0 seconds, got {raw!r}")
    return value


def lease_deadline(read_at: float, lease_seconds_left: float | None) -> float:
    """The monotonic time by which a warm copy must have caught up so that the release, the
    shipping, the commit or a fallback still fit in the prepared movement's lease
    (``lease_seconds_left`` when the movement was read at ``read_at``; None: not said, no bound)."""
    if lease_seconds_left is None:
        return math.inf
    reserve = max(LEASE_RESERVE_MIN_S, LEASE_RESERVE_FRACTION * lease_seconds_left)
    return read_at + lease_seconds_left - reserve


def jumps_enabled() -> bool:
    """``FEDLOAD_WARM_JUMP=0`` makes a warm copy mirror the source batch by batch (as before)."""
    return os.environ.get(JUMP_ENV, "1") != "0"


class WarmupFailed(RuntimeError):
    """The warm copy could not be started or did not catch up: move by stop-and-copy."""


class Diverged(RuntimeError):
    """The warm copy's batches are not the source's: finish from the source's final checkpoint."""


def warm_consumer(fragment: str, movement: int) -> str:
    return f"{fragment}.warm-{movement}"


def hold_inputs(spec: FragmentSpec, consumer: str) -> None:
    """Keep every input bucket still held for ``consumer`` (see ``StreamClient.hold``)."""
    for ref in spec.inputs:
        with StreamClient(ref.location, timeout=HOLD_TIMEOUT_S) as client:
            client.hold(ref.stream, consumer)


def release_hold(spec: FragmentSpec, consumer: str) -> None:
    for ref in spec.inputs:
        try:
            with StreamClient(ref.location, timeout=HOLD_TIMEOUT_S) as client:
                client.ack(ref.stream, consumer, RELEASED_HOLD)
        except Exception as error:  # the producer is gone: so is what it held
            log.warning("hold %s on %s not released: %s", consumer, ref.stream, error)


# -- the offset log ---------------------------------------------------------------------------
def log_tree(directory: Path) -> Tree:
    """The offset and commit logs of a checkpoint directory (read while the query may run)."""
    tree: Tree = {}
    for folder in ("offsets", "commits"):
        path = directory / folder
        if not path.is_dir():
            continue
        for entry in path.iterdir():
            if entry.name.isdigit():
                try:
                    tree[f"{folder}/{entry.name}"] = entry.read_bytes()
                except FileNotFoundError:  # trimmed meanwhile (minBatchesToRetain)
                    continue
    return tree


def batch_log(tree: Mapping[str, bytes | None]) -> tuple[dict[int, int], set[int]]:
    """(batch id -> end bucket, from ``offsets/``; the batch ids committed, from ``commits/``)."""
    ends: dict[int, int] = {}
    committed: set[int] = set()
    for name, content in tree.items():
        folder, _, batch = name.partition("/")
        if content is None or not batch.isdigit():
            continue
        if folder == "commits":
            committed.add(int(batch))
        elif folder == "offsets":
            # A version line, the batch metadata, then one line per source (SUnion's offset).
            ends[int(batch)] = int(json.loads(content.decode().strip().splitlines()[-1])["bucket"])
    return ends, committed


def snapshot_batch(packed: PackedCheckpoint) -> int:
    """The last batch a packed checkpoint has committed (-1: none)."""
    _, committed = batch_log(unpack_tree(packed.data))
    return max(committed, default=-1)


# -- the source's half ------------------------------------------------------------------------
class WarmSource:
    """Serves a live snapshot for a prepared movement, and the offset log, to a warm copy."""

    def __init__(
        self,
        runtime: FragmentRuntime,
        check_prepared: Callable[[str, int], None],
        lock_of: Callable[[str], threading.RLock],
    ) -> None:
        """``check_prepared(fragment, movement)`` raises unless the registry holds that movement
        as prepared from this host (as for a release)."""
        self._runtime = runtime
        self._check = check_prepared
        self._lock_of = lock_of
        self._holds: dict[int, tuple[str, FragmentSpec]] = {}

    def actions(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {"warm": self._warm, "offsets": self._offsets}

    def _warm(self, body: dict[str, Any]) -> dict[str, Any]:
        fragment, movement = str(body["fragment"]), int(body["movement"])
        self._check(fragment, movement)
        if self._runtime.store.local_root is None:
            raise RuntimeError("checkpoints are not on a local file system here")
        with self._lock_of(fragment):
            spec = self._runtime.running_spec(fragment)
            if spec is None or not self._runtime.is_running(fragment):
                raise RuntimeError(f"{fragment} does not run here")
            # Before the snapshot: the copy reads from the snapshot's offsets, which the
            # source's own acknowledgements would trim as it goes on.
            hold_inputs(spec, warm_consumer(fragment, movement))
            self._holds[movement] = (fragment, spec)
            snapshot = snapshot_running(self._runtime, fragment)
            # The copy starts from this snapshot: pace from here until it polls.
            self._pace(fragment, snapshot_batch(snapshot.packed))
        return self._runtime.server.stage_checkpoint(fragment, movement, snapshot.packed)

    def _pace(self, fragment: str, copy_at: int) -> None:
        pace.write(
            self._runtime.pace_file(fragment),
            self._runtime.checkpoint_dir(fragment) / "offsets",
            copy_at,
        )

    def _offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        fragment = str(body["fragment"])
        if "copy_at" in body and self._runtime.is_running(fragment):
            self._pace(fragment, int(body["copy_at"]))
        ends, committed = batch_log(log_tree(self._runtime.checkpoint_dir(fragment)))
        return {
            # Every logged batch: its range is final once logged (a restart runs it again).
            "ends": {str(batch): end for batch, end in ends.items()},
            "committed": max(committed, default=-1),
        }

    def sweep(self, status_of: Callable[[int], str]) -> None:
        """Release the holds of warm copies whose movement was aborted (a target that died
        warming leaves its hold behind). A committed movement's copy releases its own hold once
        it has read past this host's last batch."""
        for movement, (fragment, spec) in list(self._holds.items()):
            try:
                status = status_of(movement)
            except Exception:  # the registry is away: next tick
                continue
            if status == "aborted":
                release_hold(spec, warm_consumer(fragment, movement))
            if status != "prepared":
                del self._holds[movement]


# -- the target's half ------------------------------------------------------------------------
class WarmSink(SOutput):
    """SOutput for a warm copy: until ``switch`` it writes nothing, and runs only batches the
    source has committed (so written: the source's sink writes a batch before Spark commits it),
    dropping their output. A batch the source has not committed is held until it has, or until
    the switch (then it is written); one still uncertain after ``HOLD_BATCH_S`` fails the copy
    rather than drop output nobody wrote. It also holds the output BOUNDARY back until the
    switch."""

    HOLD_BATCH_S = 10.0

    def __init__(self, location: str, stream: str, epoch: int, *, namespace: int = 0) -> None:
        super().__init__(location, stream, epoch, namespace=namespace)
        self._changed = threading.Condition()
        self._writing = False
        self._cancelled = False
        self.source_committed = -1

    def holds_boundaries(self) -> bool:
        return not self._writing

    def source_at(self, committed: int) -> None:
        """``committed``: the copy's batch that stands for the source's last committed one, by
        the copy's current jumps. Set, not raised to the highest seen: a jump maps the same
        source batch to a lower copy batch, and the higher one seen before it would let the
        copy drop output of batches the source never ran (its own, after the release)."""
        with self._changed:
            self.source_committed = committed
            self._changed.notify_all()

    def switch(self) -> None:
        with self._changed:
            self._writing = True
            self._changed.notify_all()

    def cancel(self) -> None:
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()

    def write(self, batch: DataFrame, batch_id: int) -> bool:
        with self._changed:
            self._changed.wait_for(
                lambda: self._writing or self._cancelled or batch_id <= self.source_committed,
                timeout=self.HOLD_BATCH_S,
            )
            writing, known = self._writing, batch_id <= self.source_committed
        if writing:
            return super().write(batch, batch_id)
        if not known:
            raise RuntimeError(
                f"batch {batch_id} of the warm copy is not committed at the source "
                f"(at {self.source_committed}): its output would be lost"
            )
        batch.toArrow()  # run it: the state must advance as it did at the source
        self.skipped += 1
        return False


@dataclass
class WarmCopy:
    spec: FragmentSpec
    source: RemoteHost
    runtime: FragmentRuntime
    move: PreparedMove
    follow_path: Path
    sink: WarmSink | None = None
    snapshot_batch: int = -1
    bytes: int = 0
    jumps: bool = True
    # The follow file's entries, by the copy's batch id (each written once), and where the
    # copy's ids stop being the source's: (first copy batch id, source id - copy id) per jump.
    entries: dict[int, int] = field(default_factory=dict)
    segments: list[tuple[int, int]] = field(default_factory=list)
    source_namespace: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def consumer(self) -> str:
        return warm_consumer(self.name, self.move.movement_id)

    def start(self) -> None:
        if self.runtime.store.local_root is None:
            raise WarmupFailed("checkpoints are not on a local file system here")
        try:
            with StreamClient(self.source.location) as client:
                packed = client.staged("warm", self.name, self.move.movement_id)
        except Exception as error:
            raise WarmupFailed(f"no live snapshot from {self.source.host}: {error}") from error
        self.bytes += len(packed.data)
        self.snapshot_batch = snapshot_batch(packed)
        self.runtime.store.unpack(self.name, packed)
        self.source_namespace = self.runtime.output_namespace(self.name)
        self._follow({})
        output = self.spec.output
        self.sink = WarmSink(
            output.location,
            output.stream,
            self.move.epoch,
            namespace=self.runtime.output_namespace(self.name),
        )
        options = {**self.spec.options, "follow_file": str(self.follow_path)}
        self.runtime.start(
            replace(self.spec, options=options, trigger_seconds=COPY_TRIGGER_S),
            epoch=self.move.epoch,
            sink=self.sink,
        )

    def _follow(self, ends: Mapping[int, int]) -> None:
        offsets = self.runtime.checkpoint_dir(self.name) / "offsets"
        follow.write(self.follow_path, offsets, ends, hold=self.consumer)

    # -- which of the source's batches each of the copy's stands for --------------------------
    def source_id(self, batch: int) -> int:
        """The source's batch the copy's ``batch`` ran (or will run)."""
        shift = 0
        for first, segment_shift in self.segments:
            if first <= batch:
                shift = segment_shift
        return batch + shift

    def copy_id(self, source_batch: int) -> int:
        """The copy's last batch that stands for a source batch at or below ``source_batch``."""
        bounds = [(-(2**62), 0), *self.segments]
        for index in range(len(bounds) - 1, -1, -1):
            first, shift = bounds[index]
            end = bounds[index + 1][0] - 1 if index + 1 < len(bounds) else 2**62
            if source_batch - shift >= first:
                return min(source_batch - shift, end)
        return source_batch

    def _offer(self, ends: Mapping[int, int], committed: int, *, final: bool = False) -> None:
        """Offer the copy the source's logged batches (``ends``: source batch id -> end), at most
        the one after the batch it has planned (all of them once ``final``), so that it never
        holds a queue of small steps it cannot take back; when the next one to offer is
        ``JUMP_MIN_BEHIND`` or more behind the source's last committed batch (``committed``),
        offer instead all but that one as one batch of its own (a jump), and that one after it.

        A jump ends at a committed batch, never at one only logged: the copy's batch standing
        for it emits the windows of every batch the jump covered, and only a batch the source
        has written (its sink writes before Spark commits) makes the output log drop them as
        written. A source released right after logging its next batch never writes that one."""
        logged, _ = batch_log(log_tree(self.runtime.checkpoint_dir(self.name)))
        planned = max([*logged, self.snapshot_batch])
        following = max([planned, *self.entries]) + 1
        upto = 2**62 if final else planned + 1
        last = min(max(ends, default=-1), committed)
        if (
            self.jumps
            and following <= upto
            and last - self.source_id(following) >= JUMP_MIN_BEHIND
            and last in ends
            and last - 1 in ends
        ):
            log.info(
                "%s: the warm copy's batch %d runs the source's batches up to %d at once",
                self.name,
                following,
                last - 1,
            )
            self.segments.append((following, last - 1 - following))
            # With the last one behind it: the copy's Spark then never waits for its next batch
            # (a wait can end in a no-data batch of its own).
            self.entries[following] = ends[last - 1]
            self.entries[following + 1] = ends[last]
            following += 2
        while following <= upto and self.source_id(following) in ends:
            self.entries[following] = ends[self.source_id(following)]
            following += 1
        self._follow(self.entries)

    def mirror(self) -> Mirror | None:
        """The copy's batches that ran the source's under other ids (None: it never jumped)."""
        if not self.segments:
            return None
        return Mirror(self.source_namespace, tuple(self.segments), max(self.entries))

    def _check_running(self) -> None:
        failure = self.runtime.failure(self.name)
        if failure is not None or not self.runtime.is_running(self.name):
            raise WarmupFailed(f"the warm copy of {self.name} stopped: {failure}")

    def committed(self) -> int:
        _, committed = batch_log(log_tree(self.runtime.checkpoint_dir(self.name)))
        return max(committed, default=-1)

    def catch_up(self, deadline: float) -> int:
        """Follow the source until the copy has committed the source's last committed batch (or,
        after half the budget, is at most ``CLOSE_LAG_BATCHES`` behind, after three quarters at
        most ``MAX_LAG_BATCHES``, or at the end of the budget runs warm at most
        ``MAX_LAG_AT_DEADLINE`` behind); the batches behind."""
        budget = max(0.0, deadline - time.monotonic())
        patient_until = time.monotonic() + budget / 2
        close_until = time.monotonic() + budget * 3 / 4
        # How often the copy was seen how far behind: the agent's log shows why it was released
        # where it was (bench/agents/README.md reads it).
        seen: Counter[int] = Counter()
        while True:
            self._check_running()
            with StreamClient(self.source.location, timeout=5.0) as client:
                answer = client.call(
                    "offsets",
                    Grant(frozenset({RELEASE}), task=self.name, movement=self.move.movement_id),
                    fragment=self.name,
                    movement=self.move.movement_id,
                    copy_at=self.source_id(self.committed()),
                )
            ends = {int(batch): int(end) for batch, end in answer["ends"].items()}
            self._offer(ends, int(answer["committed"]))
            assert self.sink is not None
            self.sink.source_at(self.copy_id(int(answer["committed"])))
            mine = self.committed()
            lag = int(answer["committed"]) - self.source_id(mine)
            seen[lag] += 1
            now = time.monotonic()
            allowed = (
                0
                if now < patient_until
                else CLOSE_LAG_BATCHES
                if now < close_until
                else MAX_LAG_BATCHES
            )
            if mine > self.snapshot_batch and lag <= allowed:
                log.info("%s: the warm copy is %d behind; polls by lag: %s", self.name, lag, seen)
                return max(lag, 0)
            if time.monotonic() > deadline:
                if mine > self.snapshot_batch and lag <= MAX_LAG_AT_DEADLINE:
                    return max(lag, 0)
                raise WarmupFailed(
                    f"the warm copy of {self.name} reached the source's batch "
                    f"{self.source_id(mine)} (its own {mine}; it started after "
                    f"{self.snapshot_batch}), the source {answer['committed']}, within the budget "
                    f"({self._doing()}; polls by lag: {dict(seen)})"
                )
            time.sleep(FOLLOW_POLL_S)

    def _doing(self) -> str:
        """What the copy's query is doing, and the batches it was offered: the log of a copy
        that never caught up says whether it waited for the offer, planned, or ran a batch."""
        try:
            status = self.runtime.query(self.name).status
            progress = self.runtime.recent_progress(self.name, 1)
        except Exception as error:  # stopped meanwhile: say so, the failure is the news
            return f"its query is gone: {error}"
        last = progress[-1] if progress else None
        ran = "no batch" if last is None else f"last batch {last['batchId']} at {last['timestamp']}"
        offered = sorted(self.entries)[-3:]
        return f"query {status['message']!r}, {ran}, offered batches {offered}"

    def settle(self, packed: PackedCheckpoint) -> None:
        """The source's final checkpoint: check that every batch the copy logged is the source's
        batch it stands for, and let the copy follow all the source logged. A batch the copy
        logged past the source's last (a no-data batch while the source stopped) is its own: the
        sink holds it until the switch, and nobody else wrote that id. A copy that jumped keeps,
        in its checkpoint, which of its batches stand for which of the source's (``Mirror``): any
        of them run again after the switch is logged under the source's id, so the output log
        keeps it once, and its own batches under the movement's epoch."""
        self.bytes += len(packed.data)
        ends, committed = batch_log(unpack_tree(packed.data))
        mine, _ = batch_log(log_tree(self.runtime.checkpoint_dir(self.name)))
        differ = sorted(n for n, end in mine.items() if ends.get(self.source_id(n), end) != end)
        if differ:
            raise Diverged(f"batches {differ} of the warm copy of {self.name} differ")
        try:
            self._check_running()
        except WarmupFailed as error:
            raise Diverged(str(error)) from error
        assert self.sink is not None
        last_committed = max(committed, default=-1)
        self._offer(ends, last_committed, final=True)
        # After the offer: a jump in it maps the source's batches to other copy batches.
        self.sink.source_at(self.copy_id(last_committed))
        mirror = self.mirror()
        if mirror is not None:
            checkpoint = self.runtime.checkpoint_dir(self.name)
            write_mirror(checkpoint, mirror)
            write_namespace(checkpoint, self.move.epoch)
            self.sink.mirror = mirror
            self.sink.namespace = self.move.epoch

    def switch(self) -> None:
        assert self.sink is not None
        # The sink first: a batch planned after the follow file says lead is a new one.
        self.sink.switch()
        follow.lead(self.follow_path)

    def cancel(self, *, discard: bool = True) -> None:
        """Stop the copy; with ``discard`` also drop its checkpoint and release its hold."""
        if self.sink is not None:
            self.sink.cancel()
        try:
            if discard:
                self.follow_path.unlink(missing_ok=True)
                try:
                    self.runtime.discard(self.name)
                except OSError as error:
                    # The state store's last files may still be going as the directory goes
                    # (seen on a loaded machine); what is left is dropped with the next copy.
                    log.warning("the warm copy of %s left files: %s", self.name, error)
                    shutil.rmtree(self.runtime.checkpoint_dir(self.name), ignore_errors=True)
            else:
                self.runtime.stop(self.name)
        finally:
            if discard:
                release_hold(self.spec, self.consumer)


@dataclass
class Released:
    """A source that has released already: its final checkpoint is here (for ``relocate``)."""

    remote: RemoteHost
    packed: PackedCheckpoint

    @property
    def host(self) -> str:
        return self.remote.host

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        return self.packed

    def reinstate(self, fragment: FragmentSpec, epoch: int) -> None:
        self.remote.reinstate(fragment, epoch)

    def retire(self, fragment: FragmentSpec) -> None:
        self.remote.retire(fragment)


@dataclass
class WarmRelocation(Relocation):
    # The hand-off's copy when it ran to the switch (None: moved by stop-and-copy).
    copy: WarmCopy | None = None
    fallback: str | None = None
    # Batches the copy was behind the source when it was warmed enough to release it.
    lag_batches: int = 0


def warm_relocate(
    fragment: FragmentSpec,
    source: RemoteHost,
    target: FragmentRuntime,
    *,
    coordinator: MovementCoordinator,
    follow_path: Path,
    budget_s: float = SUGGESTED_WARM_BUDGET_S,
    deadline: float | None = None,
    reason: str = "load",
    on_step: Callable[[str], None] | None = None,
) -> WarmRelocation:
    """Move ``fragment`` from a live source through a warm copy (see the module docstring).

    Steps for ``on_step``: "prepared", "warming", "warmed", "released", "restored" (the final
    checkpoint checked: same point as a stop-and-copy move's), "committed", "resumed" (switched).
    The copy catches up for at most ``budget_s`` once started, and not past ``deadline``
    (monotonic; ``lease_deadline``: within the movement's lease).
    A fallback runs ``relocate``, whose steps follow."""
    began = time.perf_counter()
    move = coordinator.prepare(fragment.name, source.host, target.name, reason)
    relocation = WarmRelocation(move.movement_id, move.epoch)

    def mark(step: str) -> None:
        relocation.timings[step] = time.perf_counter() - began
        if on_step is not None:
            on_step(step)

    def fall_back(why: Exception, checkpoint: RemoteHost | Released) -> WarmRelocation:
        relocation.fallback = f"{type(why).__name__}: {why}"
        log.warning("%s: %s; moving by stop-and-copy", fragment.name, why)
        offset = time.perf_counter() - began
        plain = relocate(
            fragment, checkpoint, target, coordinator=coordinator, reason=reason, on_step=on_step
        )
        relocation.timings.update({k: v + offset for k, v in plain.timings.items()})
        relocation.checkpoint_bytes = copy.bytes + plain.checkpoint_bytes
        relocation.warnings += plain.warnings
        return relocation

    mark("prepared")
    source.movement = move.movement_id
    copy = WarmCopy(fragment, source, target, move, follow_path, jumps=jumps_enabled())
    try:
        copy.start()
        mark("warming")
        until = min(time.monotonic() + budget_s, math.inf if deadline is None else deadline)
        relocation.lag_batches = copy.catch_up(until)
        mark("warmed")
    except Exception as error:
        copy.cancel()
        return fall_back(error, source)

    final: PackedCheckpoint | None = None
    try:
        final = source.release(fragment)
        if final is None:
            raise RuntimeError(f"{source.host} released no checkpoint")
        mark("released")
        copy.settle(final)
        mark("restored")
    except Diverged as error:
        copy.cancel()
        assert final is not None
        return fall_back(error, Released(source, final))
    except Exception as error:
        coordinator.abort(move.movement_id, f"{type(error).__name__}: {error}")
        copy.cancel()
        note = _reinstate(source, fragment, move.epoch - 1)
        raise MoveAborted(
            f"move of {fragment.name} to {target.name} aborted: {error}{note}"
        ) from error
    relocation.checkpoint_bytes = copy.bytes

    try:
        epoch = coordinator.commit(move.movement_id)
    except Exception as error:
        outcome = _committed(coordinator, move)
        if outcome is None:
            # Run nowhere until the registry answers: the agent's tick starts the copy again
            # from its checkpoint and follow file if the registry names this host, else drops it.
            copy.cancel(discard=False)
            raise MoveInDoubt(f"commit of {fragment.name} unknown: {error}") from error
        if not outcome:
            coordinator.abort(move.movement_id, f"commit failed: {error}")
            copy.cancel()
            note = _reinstate(source, fragment, move.epoch - 1)
            raise MoveAborted(f"commit of {fragment.name} failed: {error}{note}") from error
        epoch = move.epoch
    mark("committed")
    try:
        with StreamClient(fragment.output.location) as client:
            client.fence(fragment.output.stream, epoch)
    except Exception as error:
        relocation.warnings.append(f"output log not fenced at commit: {error}")
    copy.switch()
    mark("resumed")
    relocation.copy = copy
    try:
        source.retire(fragment)
    except Exception as error:
        relocation.warnings.append(f"source did not retire its copy: {error}")
    return relocation


def _reinstate(source: RemoteHost, fragment: FragmentSpec, epoch: int) -> str:
    try:
        source.reinstate(fragment, epoch)
    except Exception as failure:
        # Still the host of record; its agent restarts it from its own checkpoint.
        return f"; the source did not resume: {failure}"
    return ""


def release_after_first_write(
    runtime: FragmentRuntime,
    spec: FragmentSpec,
    consumer: str | None,
    *,
    timeout: float,
    on_first: Callable[[], None] | None = None,
) -> None:
    """Wait (on a thread of its own) for the first batch this host writes itself, then release
    the copy's hold: the copy has read past the source's last batch, and its own
    acknowledgements keep what it reads from now on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            written = runtime.sink(spec.name).written
        except KeyError:  # stopped or moved on meanwhile
            return
        if written:
            if on_first is not None:
                on_first()
            if consumer is not None:
                release_hold(spec, consumer)
            return
        time.sleep(0.01)
