"""A round of work repeated on a daemon thread of the service, each round on its own: the
registry's sweepers (stale movements, failed participants). A round that raises (the database
away) is logged and the next one tries again; stopping waits for the round in progress."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from typing import Any


class PeriodicRounds(ABC):
    """Subclasses set ``period`` (seconds between rounds), ``name`` (the thread's), ``doing``
    (what a round does, for the log) and ``log``, and define ``sweep``."""

    period: float
    name: str
    doing: str
    log: logging.Logger

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def sweep(self) -> Any:
        """One round, in its own transaction."""

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.sweep()
            except Exception:
                self.log.exception("%s failed; retrying in %gs", self.doing, self.period)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the round in progress, if any (waits at most ``timeout`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
