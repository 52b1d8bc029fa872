"""The consumer following a DPC replica's companion stream (app.availability.consumer.follow):
tentative rows held while no stable copy is reachable, UNDO, corrections, REC_DONE, and the
final stable output equal to the failure-free one. Pure: the replica is the pure SOutput rules
writing a fake stable log and a fake companion, as ``spark_jobs.runtime.dpc`` writes the real
ones."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from app.availability.consumer import ReplicaConsumer, ReplicaStatus, Row, Sent
from app.availability.soutput import SOutput
from app.availability.states import NodeState
from app.availability.tuples import Kind, Message
from app.availability.tuples import Row as DPCRow

BUCKET_MS = 1000


def true_rows(bucket: int) -> list[DPCRow]:
    """The failure-free output of a bucket (a deterministic fragment: the same at every
    replica)."""
    return [DPCRow(bucket * BUCKET_MS + 999, f"k{i}") for i in range(2)]


def guessed_rows(bucket: int) -> list[DPCRow]:
    """What the fragment computes from the reachable inputs only: other values."""
    return [DPCRow(bucket * BUCKET_MS + 999, "partial")]


def as_log_row(row: DPCRow) -> Row:
    return (row.stime, row.tid)


class DPCReplica:
    """A replica as the consumer sees it: its stable log (complete below ``boundary``) and its
    companion (every message, numbered), written by the pure SOutput rules."""

    def __init__(self) -> None:
        self.rules = SOutput()
        self.log: dict[int, list[Row]] = {}
        self.boundary_at: int | None = None
        self.companion: list[Sent] = []
        self.state = NodeState.STABLE
        self.companion_reads = 0

    def _send(self, messages: list[Message]) -> None:
        for message in messages:
            self.companion.append(Sent(len(self.companion), message))
            if message.kind is Kind.STABLE:
                assert message.row is not None
                self.log.setdefault(message.row.stime // BUCKET_MS, []).append(
                    as_log_row(message.row)
                )

    def stable(self, bucket: int) -> None:
        self._send(self.rules.stable(true_rows(bucket)))
        if self.state is NodeState.STABLE:
            self.boundary_at = bucket + 1

    def tentative(self, bucket: int) -> None:
        self.state = NodeState.UP_FAILURE
        self._send(self.rules.tentative(guessed_rows(bucket)))

    def reconcile(self, first: int, end: int) -> None:
        """UNDO, the redo's corrections for [first, end), REC_DONE: STABLE again."""
        self.state = NodeState.STABILIZATION
        self._send(self.rules.begin_corrections())
        for bucket in range(first, end):
            self._send(self.rules.stable(true_rows(bucket)))
        self._send(self.rules.rec_done())
        self.state = NodeState.STABLE
        self.boundary_at = end

    # Link and CompanionLink
    def boundary(self) -> int | None:
        return self.boundary_at

    def read(self, lo: int, hi: int) -> Sequence[Row]:
        return [r for b in range(lo, hi) for r in self.log.get(b, [])]

    def messages(self, after: int) -> Sequence[Sent]:
        self.companion_reads += 1
        return [s for s in self.companion if s.seq > after]


def reference(upto: int) -> list[Row]:
    return sorted(as_log_row(r) for b in range(upto) for r in true_rows(b))


def read(consumer: ReplicaConsumer, links: dict[str, DPCReplica]) -> None:
    consumer.pull(links)
    consumer.follow(links)


def test_tentative_rows_are_held_during_the_failure_then_undone_and_corrected() -> None:
    t = DPCReplica()
    c = ReplicaConsumer("X.out", ("T",), next_bucket=0, bucket_ms=BUCKET_MS)
    links = {"T": t}
    for b in range(3):
        t.stable(b)
    read(c, links)
    assert c.output() == reference(3) and c.tentative == []

    # An input cut: buckets 3-5 go out tentatively, the stable log stops at 3.
    for b in range(3, 6):
        t.tentative(b)
        read(c, links)
    assert c.next_bucket == 3
    assert c.tentative == [r for b in range(3, 6) for r in guessed_rows(b)]
    assert c.view() == [*reference(3), *c.tentative]
    assert c.tentative_received == 3

    # The heal: UNDO, the corrections of 3-5, REC_DONE, then stable again.
    t.reconcile(3, 6)
    t.stable(6)
    followed = c.follow(links)
    assert (followed.undos, followed.undone) == (1, 3)
    assert followed.corrections == 6 and followed.rec_dones == 1
    assert c.tentative == []
    c.pull(links)
    assert c.output() == reference(7)
    assert (c.undone, c.corrections, c.rec_dones) == (3, 6, 1)
    assert not c.duplicates


def test_a_message_read_twice_is_applied_once() -> None:
    t = DPCReplica()
    c = ReplicaConsumer("X.out", ("T",), next_bucket=0, bucket_ms=BUCKET_MS)
    t.stable(0)
    t.tentative(1)

    class Repeating:
        """A transport that answers from further back than asked (a bucket re-read)."""

        def messages(self, after: int) -> Sequence[Sent]:
            return [*t.companion, *t.companion]

    c.pull({"T": t})
    c.follow({"T": Repeating()})
    c.follow({"T": Repeating()})
    assert c.tentative == guessed_rows(1)
    assert c.tentative_received == 1


def test_tentative_rows_of_buckets_already_stable_are_stale_and_not_held() -> None:
    t = DPCReplica()
    t.stable(0)
    t.tentative(1)
    t.reconcile(1, 3)
    t.tentative(3)
    # A consumer arriving late, already holding 0-2 stably (read from another copy).
    c = ReplicaConsumer("X.out", ("T",), next_bucket=3, bucket_ms=BUCKET_MS)
    c.follow({"T": t})
    # The history's first tentative row (bucket 1) was corrected; only bucket 3's is open.
    assert c.tentative == guessed_rows(3)


def test_a_switch_to_a_stable_copy_supersedes_the_tentative_rows_and_a_switch_back_resumes() -> (
    None
):
    t, o = DPCReplica(), DPCReplica()
    c = ReplicaConsumer("X.out", ("O", "T"), next_bucket=0, bucket_ms=BUCKET_MS)
    links = {"O": o, "T": t}
    for b in range(2):
        o.stable(b)
        t.stable(b)
    # O unreachable, T in failure: read T's tentative rows.
    up = [ReplicaStatus("O", NodeState.STABLE, False), ReplicaStatus("T", NodeState.STABLE, True)]
    c.choose(up, 1.0)
    t.tentative(2)
    read(c, links)
    assert c.current == "T" and c.tentative == guessed_rows(2)

    # O comes back STABLE and past bucket 2: the consumer switches, O's stable bucket 2
    # replaces T's guess without any UNDO from T.
    o.stable(2)
    views = [
        ReplicaStatus("O", NodeState.STABLE, True, boundary=3),
        ReplicaStatus("T", NodeState.UP_FAILURE, True, boundary=2),
    ]
    assert c.choose(views, 2.0) is not None
    read(c, links)
    assert c.current == "O" and c.tentative == []
    assert c.superseded == 0  # not held against O: the view never showed them with O's rows
    assert c.output() == reference(3)

    # T reconciles meanwhile; O is cut off again; back on T its companion goes on from where
    # it was left: its old guess of bucket 2 was already covered by O's stable rows (so the
    # UNDO has nothing left to drop), the corrections are not delivered twice.
    t.reconcile(2, 3)
    t.stable(3)
    o_gone = [
        ReplicaStatus("O", NodeState.STABLE, False),
        ReplicaStatus("T", NodeState.STABLE, True, boundary=4),
    ]
    assert c.choose(o_gone, 3.0) is not None
    read(c, links)
    assert c.tentative == [] and c.output() == reference(4)
    assert c.tentative_received == 1 and (c.undos, c.undone) == (1, 0) and not c.duplicates


def test_held_rows_are_dropped_once_the_stable_log_covers_their_bucket() -> None:
    t = DPCReplica()
    c = ReplicaConsumer("X.out", ("T",), next_bucket=0, bucket_ms=BUCKET_MS)
    t.tentative(0)
    c.follow({"T": t})
    assert c.tentative == guessed_rows(0)
    # A log whose stable rows of bucket 0 arrive with no UNDO (a transport that lost it).
    t.log[0] = [as_log_row(r) for r in true_rows(0)]
    t.boundary_at = 1
    c.pull({"T": t})
    assert c.tentative == [] and c.superseded == 1


@settings(max_examples=200, deadline=None)
@given(
    stable_before=st.integers(1, 5),
    failures=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3)), min_size=1, max_size=3),
    reads_every=st.integers(1, 3),
)
def test_whatever_the_failures_and_read_times_the_stable_output_is_the_failure_free_one(
    stable_before: int, failures: list[tuple[int, int]], reads_every: int
) -> None:
    """Failures of any length with stable stretches between them, the consumer reading after
    every ``reads_every`` steps: each tentative row is received once, every one is undone, the
    stable output is exactly the failure-free output, nothing stays held."""
    t = DPCReplica()
    c = ReplicaConsumer("X.out", ("T",), next_bucket=0, bucket_ms=BUCKET_MS)
    links = {"T": t}
    bucket = step = 0

    def tick() -> None:
        nonlocal step
        step += 1
        if step % reads_every == 0:
            read(c, links)

    for _ in range(stable_before):
        t.stable(bucket)
        bucket += 1
        tick()
    sent_tentative = 0
    for length, stable_after in failures:
        first = bucket
        for _ in range(length):
            t.tentative(bucket)
            sent_tentative += len(guessed_rows(bucket))
            bucket += 1
            tick()
        t.reconcile(first, bucket)
        tick()
        for _ in range(stable_after):
            t.stable(bucket)
            bucket += 1
            tick()
    read(c, links)
    assert c.output() == reference(bucket)
    assert c.tentative == [] and not c.duplicates
    assert c.undone + c.superseded == c.tentative_received <= sent_tentative
    assert c.rec_dones == len(failures)
