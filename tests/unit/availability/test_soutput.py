"""SOutput and the consumer's view: duplicates dropped, UNDO, corrections, REC_DONE."""

from __future__ import annotations

import pytest

from app.availability import Kind, Message, OutputLog, Row, SOutput, StreamView


def rows(*stimes: int) -> list[Row]:
    return [Row(t, f"r{t}", (t,)) for t in stimes]


def test_undo_then_corrections_then_rec_done() -> None:
    out = SOutput()
    view = StreamView()
    sent = out.stable(rows(1, 2)) + out.tentative(rows(3, 4))
    sent += out.begin_corrections()
    # Redo from a checkpoint regenerates 2 (a duplicate) and the corrected 3, 4, 5.
    sent += out.stable(rows(2, 3, 4, 5)) + out.rec_done()
    kinds = [m.kind for m in sent]
    assert kinds == [Kind.STABLE] * 2 + [Kind.TENTATIVE] * 2 + [Kind.UNDO] + [Kind.STABLE] * 3 + [
        Kind.REC_DONE
    ]
    assert out.duplicates_dropped == 1
    assert out.corrections_sent == 3
    for message in sent:
        view.apply(message)
    assert [r.stime for r in view.stable] == [1, 2, 3, 4, 5]
    assert view.tentative == []
    assert (view.tentative_total, view.undos, view.corrections, view.rec_dones) == (2, 1, 3, 1)


def test_no_undo_without_tentative_output() -> None:
    out = SOutput()
    out.stable(rows(1))
    assert out.begin_corrections() == []


def test_stable_on_top_of_pending_tentative_is_a_bug() -> None:
    out = SOutput()
    out.tentative(rows(1))
    with pytest.raises(RuntimeError, match="tentative rows are pending"):
        out.stable(rows(2))


def test_view_drops_duplicates_and_stale_tentative_rows() -> None:
    view = StreamView()
    for message in [Message.stable(r) for r in rows(1, 2)] + [Message.stable(rows(2)[0])]:
        view.apply(message)
    view.apply(Message.tentative(rows(1)[0]))
    assert view.duplicates == 1 and view.tentative == []


def test_log_resync_returns_stable_after_key_and_the_tentative_suffix() -> None:
    log = OutputLog()
    log.append([Message.stable(r) for r in rows(1, 2, 3)] + [Message.boundary(4)])
    log.append([Message.tentative(r) for r in rows(5, 6)])
    messages, position = log.resync((1, "r1"))
    assert [(m.kind, m.stime) for m in messages] == [
        (Kind.STABLE, 2),
        (Kind.STABLE, 3),
        (Kind.BOUNDARY, 4),
        (Kind.TENTATIVE, 5),
        (Kind.TENTATIVE, 6),
    ]
    assert position == log.next_seq == 6


def test_log_trims_only_what_every_consumer_acknowledged() -> None:
    log = OutputLog()
    log.register("c1")
    log.register("c2")
    log.append([Message.stable(r) for r in rows(1, 2, 3)])
    log.ack("c1", 3)
    assert log.first_seq == 0
    log.ack("c2", 2)
    assert log.first_seq == 1
    with pytest.raises(KeyError, match="trimmed"):
        log.read(0)
    assert [m.stime for m in log.read(1)[0]] == [2, 3]


def test_log_read_from_a_consumer_ahead_skips_what_it_holds() -> None:
    log = OutputLog()
    log.append([Message.stable(r) for r in rows(1, 2, 3)] + [Message.boundary(4)])
    messages, position = log.read(0, after=(2, "r2"))
    assert [(m.kind, m.stime) for m in messages] == [(Kind.STABLE, 3), (Kind.BOUNDARY, 4)]
    assert position == 4
