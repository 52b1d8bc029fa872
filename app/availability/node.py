"""A DPC node: SUnion -> deterministic operator -> SOutput, with checkpoint/redo reconciliation.

Per tick (Borealis SIGMOD 2005, sections 4-5):

- STABLE: release stable buckets, process them, send STABLE rows and the output BOUNDARY. The
  checkpoint is taken lazily: just before the first tentative bucket (Borealis: "the node
  checkpoints its state before processing the first tentative bucket"), or when someone reads
  ``checkpoint`` (passive standby ships it). Snapshotting after every bucket would cost
  O(state) per bucket for nothing.
- The first bucket released tentatively moves the node to UP_FAILURE; from then on its output is
  tentative (its state has diverged) and the checkpoint stays the last all-stable one.
- Once every bucket released since the checkpoint has become stable (the failure healed and the
  missing input arrived from the upstream logs), the node asks for permission to reconcile
  (replicas of a fragment never reconcile at the same time, so one keeps serving), then enters
  STABILIZATION: restore the checkpoint, UNDO, redo the now-stable buckets (``replay_per_tick``
  of them per tick, to model reconciliation time growing with the work to redo), REC_DONE,
  STABLE. New buckets wait while the node stabilises (the paper's "suspend" choice, correct when
  reconciliation is shorter than the delay budget; otherwise the consumers switch to a replica
  that is not reconciling).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.availability.operators import Operator
from app.availability.soutput import SOutput
from app.availability.states import NodeEvent, NodeState, transition
from app.availability.sunion import Bucket, DelayStrategy, SUnion
from app.availability.tuples import Message, Row


@dataclass(frozen=True)
class Checkpoint:
    """Operator state after every bucket below ``next_bucket`` was processed stably."""

    next_bucket: int
    state: Any


class DPCNode:
    def __init__(
        self,
        name: str,
        inputs: Sequence[str],
        operator: Operator,
        *,
        bucket_ms: int,
        delay_budget_ms: int,
        strategy: DelayStrategy = DelayStrategy.DELAY_EACH,
        start_bucket: int = 0,
        request_permission: Callable[[str], bool] | None = None,
        release_permission: Callable[[str], None] | None = None,
        replay_per_tick: int | None = None,
        reconcile_ms_per_bucket: float = 0.0,
    ) -> None:
        """``reconcile_ms_per_bucket``: the expected cost of redoing one bucket, used to keep
        buckets from missing their deadline while a reconciliation suspends them."""
        self.name = name
        self.operator = operator
        self.sunion = SUnion(
            inputs,
            bucket_ms=bucket_ms,
            delay_budget_ms=delay_budget_ms,
            strategy=strategy,
            start_bucket=start_bucket,
        )
        self.soutput = SOutput()
        self.state = NodeState.STABLE
        self._checkpoint = Checkpoint(start_bucket, operator.snapshot())
        self._request = request_permission or (lambda _name: True)
        self._release = release_permission or (lambda _name: None)
        self.replay_per_tick = replay_per_tick
        self.reconcile_ms_per_bucket = reconcile_ms_per_bucket
        self._replay_next = 0
        self._replay_end = 0
        self.reconciliations = 0
        self.tentative_buckets = 0
        # (event, now) for reports: when the node changed state.
        self.history: list[tuple[NodeState, int]] = [(self.state, 0)]

    # -- state -------------------------------------------------------------------------------
    def _fire(self, event: NodeEvent, now: int) -> None:
        new = transition(self.state, event)
        if new is not self.state:
            self.history.append((new, now))
        self.state = new

    @property
    def checkpoint(self) -> Checkpoint:
        """The last all-stable checkpoint; while STABLE, the current state."""
        if (
            self.state is NodeState.STABLE
            and self._checkpoint.next_bucket != self.sunion.next_bucket
        ):
            self._take_checkpoint()
        return self._checkpoint

    @property
    def replay_point(self) -> int:
        """The first bucket a replacement would have to redo (cheap: takes no checkpoint)."""
        if self.state is NodeState.STABLE:
            return self.sunion.next_bucket
        return self._checkpoint.next_bucket

    def restore(self, checkpoint: Checkpoint) -> None:
        """Install a shipped checkpoint (failover): resume after its last stable bucket."""
        self.operator.restore(checkpoint.state)
        self._checkpoint = checkpoint
        self.sunion.next_bucket = checkpoint.next_bucket

    # -- input -------------------------------------------------------------------------------
    def receive(self, name: str, message: Message) -> None:
        self.sunion.receive(name, message)

    # -- processing --------------------------------------------------------------------------
    def _healed(self) -> bool:
        released = range(self._checkpoint.next_bucket, self.sunion.next_bucket)
        return all(self.sunion.stable_ready(b) for b in released)

    def _take_checkpoint(self) -> None:
        # snapshot() returns an independent copy (the Operator contract): no deepcopy here.
        self._checkpoint = Checkpoint(self.sunion.next_bucket, self.operator.snapshot())
        self.sunion.trim(self._checkpoint.next_bucket)

    def _process_stable(self, bucket: Bucket) -> list[Message]:
        rows = self.operator.process(bucket.number, bucket.rows)
        out = self.soutput.stable(rows)
        out.append(Message.boundary(self.sunion.end_of(bucket.number)))
        return out

    def _replay(self, now: int) -> list[Message]:
        out: list[Message] = []
        limit = self.replay_per_tick if self.replay_per_tick is not None else 1 << 62
        while self._replay_next < self._replay_end and limit > 0:
            bucket = self.sunion.bucket(self._replay_next, stable=True)
            out.extend(self._process_stable(bucket))
            self._replay_next += 1
            limit -= 1
        if self._replay_next >= self._replay_end:
            out.extend(self.soutput.rec_done())
            self._fire(NodeEvent.RECONCILED, now)
            # Stable again: the redone input is no longer needed; the checkpoint is lazy.
            self.sunion.trim(self.sunion.next_bucket)
            self._release(self.name)
        return out

    def _flush_due(self, now: int) -> list[Message]:
        out: list[Message] = []
        redo = self.sunion.next_bucket - self._checkpoint.next_bucket
        horizon = now + redo * self.reconcile_ms_per_bucket
        while (
            self.sunion.stable_ready(self.sunion.next_bucket)
            and self.sunion.due_at(self.sunion.next_bucket) + self.sunion.delay_budget_ms <= horizon
        ):
            bucket = self.sunion.release(now, in_failure=True)
            assert bucket is not None
            out.extend(self.soutput.tentative(self.operator.process(bucket.number, bucket.rows)))
        return out

    def tick(self, now: int) -> list[Message]:
        """Advance to clock ``now`` (ms, same scale as stime); returns messages to send."""
        out: list[Message] = []
        if self.state is NodeState.STABILIZATION:
            out.extend(self._replay(now))
        if self.state is NodeState.UP_FAILURE and self._healed():
            # The redo suspends new buckets (the paper's "suspend" choice). Buckets whose
            # deadline would pass while it runs go out now, tentatively (the redo corrects
            # them); the others wait and come out stable after it.
            out.extend(self._flush_due(now))
        if self.state is NodeState.UP_FAILURE and self._healed() and self._request(self.name):
            self._fire(NodeEvent.HEALED, now)
            self.reconciliations += 1
            self._replay_next = self._checkpoint.next_bucket
            self._replay_end = self.sunion.next_bucket
            self.operator.restore(self._checkpoint.state)
            out.extend(self.soutput.begin_corrections())
            out.extend(self._replay(now))
        if self.state is NodeState.STABILIZATION:
            return out
        while True:
            bucket = self.sunion.release(now, in_failure=self.state is NodeState.UP_FAILURE)
            if bucket is None:
                break
            if bucket.stable and self.state is NodeState.STABLE:
                out.extend(self._process_stable(bucket))
                # A stable node never redoes processed buckets: drop their rows.
                self.sunion.trim(self.sunion.next_bucket)
                continue
            if self.state is NodeState.STABLE:
                # Entering UP_FAILURE: checkpoint the state as of the bucket before this one.
                self._checkpoint = Checkpoint(bucket.number, self.operator.snapshot())
            if not bucket.stable:
                self.tentative_buckets += 1
            self._fire(NodeEvent.TENTATIVE_INPUT, now)
            rows: list[Row] = self.operator.process(bucket.number, bucket.rows)
            out.extend(self.soutput.tentative(rows))
            if self._healed():
                # Healed between two releases: reconcile (next tick) rather than go on
                # producing tentative rows that would only need correcting.
                break
        return out
