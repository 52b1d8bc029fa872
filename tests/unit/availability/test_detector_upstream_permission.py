"""Failure detector (injected clock), upstream replica choice, reconciliation permission."""

from __future__ import annotations

import pytest

from app.availability import (
    FailureDetector,
    NodeState,
    PeerPermission,
    PeerStatus,
    ReconciliationPermits,
    ReplicaView,
    UpstreamSelector,
    grant_peer_request,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_peer_fails_after_a_heartbeat_unanswered_to_the_end_of_the_window() -> None:
    clock = Clock()
    detector = FailureDetector(clock, interval=0.1, misses=3)
    detector.heard("B")
    clock.now = 0.05
    assert detector.status("B") is PeerStatus.ALIVE
    clock.now = 0.25
    assert detector.status("B") is PeerStatus.SUSPECT
    # The next ping waits to the end of the window (0.3 s after the last answer).
    assert detector.ping_timeout("B") == pytest.approx(0.1)
    clock.now = 0.2
    assert detector.ping_timeout("B") == pytest.approx(0.1)  # never less than one interval
    clock.now = 0.1
    assert detector.ping_timeout("B") == pytest.approx(0.2)
    clock.now = 0.29
    detector.missed("B")  # a wait that ended before the window closed is not enough
    assert not detector.failed("B")
    clock.now = 0.30
    detector.missed("B")
    assert detector.failed("B")
    detector.heard("B")
    assert detector.status("B") is PeerStatus.ALIVE


def test_silence_alone_is_suspect_however_long_it_lasts() -> None:
    # The asker itself was not scheduled: no wait of its ended unanswered, so nothing is
    # known about the peer but the asker's own absence (the false suspicions of stop 17).
    clock = Clock()
    detector = FailureDetector(clock, interval=0.1, misses=3)
    detector.heard("B")
    clock.now = 5.0
    assert detector.status("B") is PeerStatus.SUSPECT
    assert detector.ping_timeout("B") == pytest.approx(0.3)


def test_silent_peer_fails_from_the_time_it_was_watched() -> None:
    clock = Clock()
    detector = FailureDetector(clock, interval=0.2, misses=2)
    assert detector.status("R") is PeerStatus.UNKNOWN
    detector.watch("R")
    clock.now = 0.39
    detector.missed("R")
    assert detector.status("R") is PeerStatus.UNKNOWN
    clock.now = 0.41
    assert detector.status("R") is PeerStatus.UNKNOWN
    detector.missed("R")
    assert detector.failed("R")


@pytest.mark.parametrize(("interval", "misses"), [(0.0, 3), (-1.0, 3), (0.1, 0)])
def test_a_bad_window_is_refused_naming_the_setting(interval: float, misses: int) -> None:
    with pytest.raises(ValueError, match=r"interval|misses"):
        FailureDetector(Clock(), interval=interval, misses=misses)


def test_silence_counts_from_the_last_answer_or_the_watch() -> None:
    clock = Clock()
    detector = FailureDetector(clock, interval=0.1, misses=3)
    clock.now = 1.0
    detector.watch("R")
    clock.now = 1.25
    assert detector.silence("R") == pytest.approx(0.25)
    detector.heard("R")
    clock.now = 1.32
    assert detector.silence("R") == pytest.approx(0.07)
    # A peer nobody watches has been silent for no time at all (not failed, not heard).
    assert detector.silence("nobody") == 0.0


def test_heartbeats_are_paced_by_the_interval() -> None:
    clock = Clock()
    detector = FailureDetector(clock, interval=0.1)
    assert detector.should_ping("B")
    clock.now = 0.05
    assert not detector.should_ping("B")
    clock.now = 0.1
    assert detector.should_ping("B")


def test_detector_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="misses"):
        FailureDetector(Clock(), misses=0)


def views(**states: NodeState | None) -> list[ReplicaView]:
    return [ReplicaView(name, state, state is not None) for name, state in states.items()]


def test_prefers_stable_then_up_failure_then_stabilization() -> None:
    s = UpstreamSelector("out", ("B", "R"))
    assert s.best(views(B=NodeState.STABILIZATION, R=NodeState.UP_FAILURE)) == "R"
    assert s.best(views(B=NodeState.UP_FAILURE, R=NodeState.STABLE)) == "R"
    assert s.best(views(B=None, R=NodeState.STABILIZATION)) == "R"
    assert s.best(views(B=None, R=None)) is None


def test_switches_away_and_stays_after_the_heal_with_versions() -> None:
    s = UpstreamSelector("out", ("B", "R"))
    first = s.decide(views(B=NodeState.STABLE, R=NodeState.STABLE), 0.0)
    assert first is not None and first.to_replica == "B" and first.version == 1
    moved = s.decide(views(B=None, R=NodeState.STABLE), 1.0)
    assert moved is not None and (moved.from_replica, moved.to_replica, moved.version) == (
        "B",
        "R",
        2,
    )
    assert s.decide(views(B=NodeState.STABLE, R=NodeState.STABLE), 2.0) is None
    assert s.current == "R" and len(s.switches) == 2


def test_only_one_replica_of_a_fragment_reconciles_at_a_time() -> None:
    permits = ReconciliationPermits()
    assert permits.request("f", "B")
    assert permits.request("f", "B")
    assert not permits.request("f", "R")
    assert permits.request("g", "R")
    permits.release("f", "R")  # not the holder: no effect
    assert permits.holder("f") == "B"
    permits.release("f", "B")
    assert permits.request("f", "R")


def test_peer_rule_never_lets_two_askers_both_go() -> None:
    for a, b in [("B", "R"), ("R", "B")]:
        a_grants = grant_peer_request(a, NodeState.UP_FAILURE, True, b)
        b_grants = grant_peer_request(b, NodeState.UP_FAILURE, True, a)
        assert a_grants != b_grants
    assert not grant_peer_request("B", NodeState.STABILIZATION, False, "R")
    assert grant_peer_request("B", NodeState.STABLE, False, "R")


def test_peer_permission_grant_blocks_own_request_until_release() -> None:
    b, r = PeerPermission("B", lease_ms=1000), PeerPermission("R", lease_ms=1000)
    b.asking = True
    assert r.on_request("B", NodeState.UP_FAILURE, now=0)
    assert not r.may_ask(now=10)
    r.asking = True
    # B holds the grant and is reconciling: it refuses R.
    assert not b.on_request("R", NodeState.STABILIZATION, now=10)
    r.on_release("B")
    assert r.may_ask(now=20)
    # The lease runs out on its own if the peer never releases (it crashed).
    assert r.on_request("B", NodeState.UP_FAILURE, now=30)
    assert r.may_ask(now=1031)


def test_crossing_requests_grant_exactly_one() -> None:
    b, r = PeerPermission("B"), PeerPermission("R")
    b.asking = r.asking = True
    granted_to_b = r.on_request("B", NodeState.UP_FAILURE, now=0)
    granted_to_r = b.on_request("R", NodeState.UP_FAILURE, now=0)
    assert granted_to_b != granted_to_r
