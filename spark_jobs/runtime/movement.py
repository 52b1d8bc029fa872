"""The one movement path: restore a checkpoint at a target and replay input from its offsets.

``relocate`` serves every row of DESIGN.md's table; only the ``CheckpointSource`` differs:

- ``LiveHost``: load shedding / move-back. The source host stops the query after its last
  committed micro-batch, packs the checkpoint directory and ships it over Flight; on abort it
  restarts the fragment itself, from the checkpoint it still has.
- ``RemoteHost``: the same, when the source host is another process: it is asked over Flight
  to release the fragment for this movement, and the checkpoint is pulled from it.
- ``AlreadyShipped``: failover with passive standby: the checkpoint is already in the target's
  inbox (shipped earlier); nothing to stop.
- ``NoCheckpoint``: failover with upstream backup: empty state, ``replay_from`` says where to
  start reading the upstream logs.
- ``RunningCopy``: failover to an active replica: the copy already runs at the target from its
  own state; nothing is restored or started, the commit makes it the host and ``take_over``
  points its output at the task's log.

Sequence (two-phase with the registry through ``MovementCoordinator``):

1. prepare: the registry records the movement; the target's epoch is the current one + 1.
2. release + ship: the source stops after its last committed batch, its checkpoint is packed and
   pushed to the target's Flight server, which verifies size and sha256 or refuses it.
3. restore: the target unpacks the verified checkpoint into its checkpoint root.
4. commit: the registry makes the target the host with the new epoch; the output log is fenced
   at that epoch, so the old host can no longer append (even if it is still alive).
5. resume: the target starts the query; SUnion continues from the checkpoint's offsets.

Any failure in 1-3 aborts the movement and the source resumes, so the source stays the host and
its output is intact. The target starts only after commit: a target that ran before commit could
write micro-batches that the source, resuming after an abort, would also write with different
content under the same batch ids; starting after commit costs no more than a registry round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from spark_jobs.runtime.coordinator import MovementCoordinator, PreparedMove
from spark_jobs.runtime.host import FragmentRuntime, FragmentSpec
from spark_jobs.runtime.soutput import SOutput
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient


class MoveAborted(RuntimeError):
    """The movement was aborted before commit; the source host is still the host."""


class ResumeFailed(RuntimeError):
    """Committed, but the target's query did not start; restart it there from its checkpoint."""


class MoveInDoubt(RuntimeError):
    """Commit sent but its outcome unknown; the fragment runs nowhere until it is resolved."""


class CheckpointSource(Protocol):
    @property
    def host(self) -> str:
        """The participant the fragment moves away from (the registry's current host)."""
        ...

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        """Stop the fragment (if alive) and return its packed checkpoint, None if not needed."""
        ...

    def reinstate(self, fragment: FragmentSpec, epoch: int) -> None:
        """After an abort: run the fragment again where it was (no-op if the source is dead)."""
        ...

    def retire(self, fragment: FragmentSpec) -> None:
        """After commit: drop the local copy."""
        ...


@dataclass
class LiveHost:
    runtime: FragmentRuntime

    @property
    def host(self) -> str:
        return self.runtime.name

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        self.runtime.stop(fragment.name)
        return self.runtime.pack(fragment.name)

    def reinstate(self, fragment: FragmentSpec, epoch: int) -> None:
        if not self.runtime.is_running(fragment.name):
            self.runtime.start(fragment, epoch=epoch)

    def retire(self, fragment: FragmentSpec) -> None:
        self.runtime.discard(fragment.name)


@dataclass
class RemoteHost:
    """A live source host in another process, reached only through its Flight endpoint.

    Used by the receiving agent: it asks the source to release the fragment for this movement
    (the source stops after its last commit and packs), pulls the checkpoint and verifies it.
    """

    host: str
    location: str
    movement: int = 0

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        with StreamClient(self.location) as client:
            return client.release(fragment.name, self.movement)

    def reinstate(self, fragment: FragmentSpec, epoch: int) -> None:
        with StreamClient(self.location) as client:
            client.reinstate(fragment.name, epoch, movement=self.movement)

    def retire(self, fragment: FragmentSpec) -> None:
        with StreamClient(self.location) as client:
            client.retire(fragment.name, movement=self.movement)


@dataclass
class AlreadyShipped:
    """A checkpoint already verified in the target's inbox under ``movement``."""

    host: str
    movement: int

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        return None

    def reinstate(self, fragment: FragmentSpec, epoch: int) -> None:
        return None

    def retire(self, fragment: FragmentSpec) -> None:
        return None


@dataclass
class NoCheckpoint:
    host: str

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        return None

    def reinstate(self, fragment: FragmentSpec, epoch: int) -> None:
        return None

    def retire(self, fragment: FragmentSpec) -> None:
        return None


@dataclass
class RunningCopy:
    """An active replica already running at the target (``spark_jobs.runtime.promote``).

    ``take_over(epoch)`` is called after the commit and the fence, where a restart would start
    the query: the copy becomes the fragment's host as it runs."""

    host: str
    take_over: Callable[[int], None]

    def release(self, fragment: FragmentSpec) -> PackedCheckpoint | None:
        return None

    def reinstate(self, fragment: FragmentSpec, epoch: int) -> None:
        return None

    def retire(self, fragment: FragmentSpec) -> None:
        return None


@dataclass
class Relocation:
    movement_id: int
    epoch: int
    # Seconds from prepare to the end of each step, for the benchmark and the agent's logs.
    timings: dict[str, float] = field(default_factory=dict)
    checkpoint_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def relocate(
    fragment: FragmentSpec,
    checkpoint_source: CheckpointSource,
    target: FragmentRuntime,
    replay_from: int | None = None,
    *,
    coordinator: MovementCoordinator,
    reason: str = "load",
    on_step: Callable[[str], None] | None = None,
    sink: SOutput | None = None,
) -> Relocation:
    """Move ``fragment`` to ``target``; returns once the target's query is started.

    ``on_step(step)`` is called after each step ("prepared", "released", "shipped", "restored",
    "committed", "resumed"): progress for a caller, and the fault-injection points of the crash
    tests (an agent paused at a step is killed there). ``sink`` replaces the target's plain
    SOutput (a failover's, which writes its batches apart from the failed host's)."""
    began = time.perf_counter()
    move = coordinator.prepare(fragment.name, checkpoint_source.host, target.name, reason)
    relocation = Relocation(move.movement_id, move.epoch)

    def mark(step: str) -> None:
        relocation.timings[step] = time.perf_counter() - began
        if on_step is not None:
            on_step(step)

    mark("prepared")

    previous_epoch = move.epoch - 1
    if isinstance(checkpoint_source, RemoteHost):
        # The source checks the movement id it is asked to release for (authorize_release).
        checkpoint_source.movement = move.movement_id
    try:
        packed = checkpoint_source.release(fragment)
        mark("released")
        if packed is not None:
            relocation.checkpoint_bytes = len(packed.data)
            with StreamClient(target.location) as client:
                client.ship_checkpoint(fragment.name, move.movement_id, packed)
            mark("shipped")
        if packed is not None or isinstance(checkpoint_source, AlreadyShipped):
            movement = (
                checkpoint_source.movement
                if isinstance(checkpoint_source, AlreadyShipped)
                else move.movement_id
            )
            target.restore(fragment.name, movement)
        mark("restored")
    except Exception as error:
        coordinator.abort(move.movement_id, f"{type(error).__name__}: {error}")
        target.discard(fragment.name)
        note = ""
        try:
            checkpoint_source.reinstate(fragment, previous_epoch)
        except Exception as failure:
            # Still the host of record; its agent restarts it from its own checkpoint.
            note = f"; the source did not resume: {failure}"
        raise MoveAborted(
            f"move of {fragment.name} to {target.name} aborted: {error}{note}"
        ) from error

    try:
        epoch = coordinator.commit(move.movement_id)
    except Exception as error:
        # The answer may be lost while the commit happened: ask the registry who the host is.
        outcome = _committed(coordinator, move)
        if outcome is None:
            # Nobody can tell: run nowhere rather than risk two hosts; the caller retries the
            # check (the checkpoint is installed at the target and still packed at the source).
            raise MoveInDoubt(f"commit of {fragment.name} unknown: {error}") from error
        if not outcome:
            coordinator.abort(move.movement_id, f"commit failed: {error}")
            target.discard(fragment.name)
            note = ""
            try:
                checkpoint_source.reinstate(fragment, previous_epoch)
            except Exception as failure:
                # Still the host of record; its agent restarts it from its own checkpoint.
                note = f"; the source did not resume: {failure}"
            raise MoveAborted(f"commit of {fragment.name} failed: {error}{note}") from error
        epoch = move.epoch
    mark("committed")
    try:
        with StreamClient(fragment.output.location) as client:
            client.fence(fragment.output.stream, epoch)
    except Exception as error:
        # Not fatal: the target's first write carries the new epoch and raises the fence then;
        # until then the old host is stopped anyway. Resuming matters more than fencing early.
        relocation.warnings.append(f"output log not fenced at commit: {error}")
    # With a checkpoint, Spark resumes from its offset log and ignores replay_from.
    try:
        if isinstance(checkpoint_source, RunningCopy):
            checkpoint_source.take_over(epoch)
        else:
            target.start(fragment, epoch=epoch, replay_from=replay_from, sink=sink)
    except Exception as error:
        # Committed: the target is the host and holds the restored checkpoint; it (or its
        # agent after a crash) starts again from it. The source keeps its copy until then.
        raise ResumeFailed(
            f"{fragment.name} moved to {target.name} (epoch {epoch}) but did not start: {error}"
        ) from error
    mark("resumed")
    try:
        checkpoint_source.retire(fragment)
    except Exception as error:
        # Moved and running here; the source's stale copy is dropped by its own host when it
        # next sees that the registry names another host.
        relocation.warnings.append(f"source did not retire its copy: {error}")
    return relocation


def _committed(coordinator: MovementCoordinator, move: PreparedMove) -> bool | None:
    """Whether the registry made the target the host; None if the registry cannot be read."""
    try:
        return (
            coordinator.host(move.fragment) == move.target
            and coordinator.current_epoch(move.fragment) == move.epoch
        )
    except Exception:
        return None
