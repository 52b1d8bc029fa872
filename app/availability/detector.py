"""Heartbeat failure detector, driven by an injected clock (DESIGN.md: every 100 ms, failed
after 3 misses, both configurable). A consumer polls each upstream replica every ``interval``;
an answer is a heartbeat. Silence for one interval makes a peer suspect, ``misses`` intervals
failed. Only time since the last answer matters, so a slow answer never counts twice."""

from __future__ import annotations

import enum
from collections.abc import Callable


class PeerStatus(enum.StrEnum):
    UNKNOWN = "unknown"
    ALIVE = "alive"
    SUSPECT = "suspect"
    FAILED = "failed"


class FailureDetector:
    def __init__(
        self, clock: Callable[[], float], *, interval: float = 0.1, misses: int = 3
    ) -> None:
        if interval <= 0:
            raise ValueError(f"FailureDetector: interval must be positive, got {interval}")
        if misses < 1:
            raise ValueError(f"FailureDetector: misses must be >= 1, got {misses}")
        self.clock = clock
        self.interval = interval
        self.misses = misses
        self._heard: dict[str, float] = {}
        self._watched: dict[str, float] = {}
        self._asked: dict[str, float] = {}

    def watch(self, peer: str) -> None:
        """Start watching: a peer never heard from fails after ``misses`` intervals too."""
        self._watched.setdefault(peer, self.clock())

    def heard(self, peer: str) -> None:
        self._watched.setdefault(peer, self.clock())
        self._heard[peer] = self.clock()

    def should_ping(self, peer: str) -> bool:
        """True at most once per interval per peer; the caller then sends a heartbeat request."""
        now = self.clock()
        if now - self._asked.get(peer, float("-inf")) >= self.interval:
            self._asked[peer] = now
            return True
        return False

    def silence(self, peer: str) -> float:
        """Seconds since the peer was last heard (or watched, if never heard)."""
        return self.clock() - self._heard.get(peer, self._watched.get(peer, self.clock()))

    def status(self, peer: str) -> PeerStatus:
        if peer not in self._watched:
            return PeerStatus.UNKNOWN
        last = self._heard.get(peer, self._watched[peer])
        silent = self.clock() - last
        if silent > self.interval * self.misses:
            return PeerStatus.FAILED
        if peer not in self._heard:
            return PeerStatus.UNKNOWN
        if silent > self.interval:
            return PeerStatus.SUSPECT
        return PeerStatus.ALIVE

    def failed(self, peer: str) -> bool:
        return self.status(peer) is PeerStatus.FAILED
