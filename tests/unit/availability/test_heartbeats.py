"""The one heartbeat loop (``app.availability.heartbeats``) with a real clock and real threads,
but a transport injected: a peer that answers, one that stops, one that answers late."""

from __future__ import annotations

import threading
import time

from app.availability.detector import FailureDetector, PeerStatus, verdict
from app.availability.heartbeats import HeartbeatLoop, ping_once, wait_until_failed


def test_verdict_needs_a_verified_miss_spanning_the_window() -> None:
    common = {"watched_since": 0.0, "interval": 1.0, "misses": 3}
    assert verdict(last_heard=10.0, verified_until=None, now=99.0, **common) is PeerStatus.SUSPECT
    assert verdict(last_heard=10.0, verified_until=12.9, now=13.0, **common) is PeerStatus.SUSPECT
    assert verdict(last_heard=10.0, verified_until=13.0, now=13.0, **common) is PeerStatus.FAILED
    assert verdict(last_heard=10.0, verified_until=None, now=10.5, **common) is PeerStatus.ALIVE
    assert verdict(last_heard=None, verified_until=2.0, now=2.0, **common) is PeerStatus.UNKNOWN
    assert verdict(last_heard=None, verified_until=3.0, now=3.0, **common) is PeerStatus.FAILED


def test_ping_once_records_what_the_wait_saw() -> None:
    detector = FailureDetector(time.monotonic, interval=0.05, misses=2)
    detector.watch("B")
    assert ping_once(detector, "B", lambda peer, timeout: {"peer": peer}) == {"peer": "B"}
    assert detector.status("B") is PeerStatus.ALIVE

    def refused(peer: str, timeout: float) -> None:
        raise ConnectionRefusedError(peer)

    assert ping_once(detector, "B", refused) is None
    assert detector.status("B") is not PeerStatus.FAILED  # one early refusal is no window


def test_a_peer_that_stops_answering_is_failed_after_the_window() -> None:
    detector = FailureDetector(time.monotonic, interval=0.02, misses=3)
    alive = threading.Event()
    alive.set()

    def ping(peer: str, timeout: float) -> None:
        if not alive.is_set():
            raise TimeoutError(peer)

    detector.heard("B")
    stopped_at = time.monotonic()
    alive.clear()
    assert wait_until_failed(detector, "B", ping, timeout=5.0)
    assert time.monotonic() - stopped_at >= detector.window


def test_a_slow_answer_within_the_window_keeps_the_peer_alive() -> None:
    # Each answer takes two intervals: past one interval the peer is suspect, never failed,
    # because every ping waits for its answer to the end of the window.
    detector = FailureDetector(time.monotonic, interval=0.02, misses=3)
    answers: list[str] = []

    def slow(peer: str, timeout: float) -> str:
        time.sleep(0.04)
        if timeout < 0.04:
            raise TimeoutError(peer)
        return peer

    loop = HeartbeatLoop(detector, slow, on_answer=lambda peer, answer: answers.append(answer))
    loop.watch("B")
    deadline = time.monotonic() + 0.5
    seen = set()
    while time.monotonic() < deadline:
        seen.add(loop.status("B"))
        time.sleep(0.005)
    loop.stop()
    assert PeerStatus.FAILED not in seen
    assert len(answers) >= 3


def test_a_silent_peer_does_not_delay_another() -> None:
    detector = FailureDetector(time.monotonic, interval=0.02, misses=3)
    gone = threading.Event()

    def ping(peer: str, timeout: float) -> str:
        if peer == "dead":
            gone.wait(timeout)
            raise TimeoutError(peer)
        return peer

    loop = HeartbeatLoop(detector, ping)
    loop.watch("dead")
    loop.watch("live")
    deadline = time.monotonic() + 2.0
    while loop.status("dead") is not PeerStatus.FAILED and time.monotonic() < deadline:
        assert loop.status("live") is not PeerStatus.FAILED
        time.sleep(0.005)
    loop.stop()
    assert detector.failed("dead")
    assert not detector.failed("live")
