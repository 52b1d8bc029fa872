"""The agent's heartbeats to the service: a thread of their own, so that a tick busy with a
move (seconds) never silences the participant, and the registry's failure sweeper
(``app.participants.failures``) hears it at the registry's own interval, which every answer
carries (``heartbeat_interval_seconds``).

An answer with ``fenced: true`` means the registry declared this participant failed (a window
closed with no heartbeat: the agent was stopped, starved or cut off). The rule the registry
documents: stop every fragment and replica that ran here, then rejoin. The heartbeat thread only
raises ``fenced``; the agent's loop does the rest between two ticks (``settle``), so that
no fragment is stopped in the middle of a tick's move.

The thread asks the kernel for a higher scheduling priority for itself alone (a Linux thread is
a task of its own; best effort, as the HA heartbeat responder does for its process): on a
machine loaded past its cores a beat must not wait for a CPU behind the agent's Spark work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from app.participant.client import FedloadClient

log = logging.getLogger("fedload.agent")

# As the HA responder (spark_jobs/ha/heartbeat.py): a nice of -10 took its worst answer at load
# 11 from 238 ms to 140 ms; it uses next to no CPU.
NICE = -10


class ServiceHeartbeats:
    def __init__(
        self,
        client: FedloadClient,
        endpoint: Callable[[], str | None],
        *,
        interval: float = 1.0,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"heartbeat interval must be > 0 s, got {interval}")
        self._client = client
        self._endpoint = endpoint
        self.interval = interval
        self.fenced = threading.Event()
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> dict[str, Any]:
        """One heartbeat now; the answer paces the next and may say the agent is fenced."""
        endpoint = self._endpoint()
        answer = self._client.heartbeat(**({"endpoint": endpoint} if endpoint else {}))
        self.beats += 1
        self.interval = float(answer.get("heartbeat_interval_seconds") or self.interval)
        if answer.get("fenced"):
            if not self.fenced.is_set():
                log.warning("the registry declared this participant failed: fenced")
            self.fenced.set()
        return answer

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        while True:
            began = time.monotonic()
            try:
                self.beat()
            except Exception as error:  # the service away: the tick loop backs off, not this
                log.debug("heartbeat failed: %s", error)
            # Paced from each beat's start: a slow answer shortens the wait, never adds to it.
            if self._stop.wait(max(0.0, began + self.interval - time.monotonic())):
                return

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
            self._thread.start()

    def settle(self, drop_all: Callable[[], None]) -> bool:
        """If the registry fenced this participant: drop everything that ran here, then rejoin
        (the registry's rule). True when it did; the next tick runs what the registry says.
        Called by the agent's loop between ticks."""
        if not self.fenced.is_set():
            return False
        drop_all()
        self._client.rejoin()
        self.fenced.clear()
        log.warning("dropped every fragment and replica, and rejoined the federation")
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
