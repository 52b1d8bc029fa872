"""The one heartbeat loop for askers that ping (agent to agent, the HA drivers): one thread
per peer, so a silent peer, whose ping waits to the end of the window, never delays another's.

The transport is injected: ``ping(peer, timeout)`` returns when the peer answered and raises
(any exception: timeout, refused, reset) when it did not within ``timeout``. The rule is
``app.availability.detector``'s; this module only drives it. Standard library only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from app.availability.detector import FailureDetector, PeerStatus

Ping = Callable[[str, float], Any]


def ping_once(detector: FailureDetector, peer: str, ping: Ping) -> Any:
    """One heartbeat to ``peer``: waits for its answer to the end of the window and records the
    outcome (``heard`` or ``missed``) in ``detector``. Returns the answer, None on a miss."""
    try:
        answer = ping(peer, detector.ping_timeout(peer))
    except Exception:
        detector.missed(peer)
        return None
    detector.heard(peer)
    return answer


def wait_until_failed(
    detector: FailureDetector,
    peer: str,
    ping: Ping,
    *,
    stop: threading.Event | None = None,
    timeout: float | None = None,
) -> bool:
    """Heartbeats to ``peer`` from the calling thread until the detector declares it failed
    (True), ``stop`` is set or ``timeout`` seconds passed (False)."""
    detector.watch(peer)
    stop = stop or threading.Event()
    give_up = None if timeout is None else time.monotonic() + timeout
    while not detector.failed(peer):
        if stop.is_set() or (give_up is not None and time.monotonic() >= give_up):
            return False
        if detector.should_ping(peer):
            ping_once(detector, peer, ping)
        else:
            stop.wait(detector.interval / 10)
    return True


class HeartbeatLoop:
    """Background heartbeats to a changing set of peers, one daemon thread each.

    ``on_answer(peer, answer)`` runs in the peer's thread after each answer (e.g. to keep the
    DPC state it carries). ``lock`` guards the detector when other threads read it."""

    def __init__(
        self,
        detector: FailureDetector,
        ping: Ping,
        *,
        on_answer: Callable[[str, Any], None] | None = None,
        lock: threading.Lock | None = None,
        name: str = "heartbeats",
    ) -> None:
        self.detector = detector
        self._ping = ping
        self._on_answer = on_answer
        self._lock = lock or threading.Lock()
        self._name = name
        self._stop = threading.Event()
        self._threads: dict[str, threading.Thread] = {}

    def watch(self, peer: str) -> None:
        """Start heartbeats to ``peer`` (no-op if already watched)."""
        if peer in self._threads or self._stop.is_set():
            return
        with self._lock:
            self.detector.watch(peer)
        thread = threading.Thread(
            target=self._run, args=(peer,), name=f"{self._name}-{peer}", daemon=True
        )
        self._threads[peer] = thread
        thread.start()

    def status(self, peer: str) -> PeerStatus:
        with self._lock:
            return self.detector.status(peer)

    def _run(self, peer: str) -> None:
        while not self._stop.wait(self.detector.interval / 10):
            with self._lock:
                due = self.detector.should_ping(peer)
                timeout = self.detector.ping_timeout(peer)
            if not due:
                continue
            try:
                answer = self._ping(peer, timeout)
            except Exception:
                with self._lock:
                    self.detector.missed(peer)
                continue
            with self._lock:
                self.detector.heard(peer)
            if self._on_answer is not None:
                self._on_answer(peer, answer)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads.values():
            thread.join(timeout)
