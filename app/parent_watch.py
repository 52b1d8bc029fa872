"""Stop an agent or a service whose launcher is gone (``FEDLOAD_STOP_WITH_PARENT``).

A scenario driver or benchmark that is itself killed (SIGTERM, SIGKILL: its ``finally`` blocks
never run) left its agents running, each with a Spark JVM busy at the live edge: three of them
took a 2-vCPU machine's cores from the next benchmark run (session 29). A driver sets the
variable to 1 for every process it starts; ``fedload agent`` and ``fedload serve`` note their
parent at start and stop cleanly, as on SIGTERM, once they have been re-parented. The parent as
found, not a pid the driver passes: a launcher prefix that forks (rather than execs) would be
the parent. Polling, not ``PR_SET_PDEATHSIG``: that signal follows the *thread* that forked, so
a driver that starts an agent from a helper thread would see it stopped when that thread ends.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

ENV = "FEDLOAD_STOP_WITH_PARENT"
POLL_S = 1.0

log = logging.getLogger(__name__)


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the variable asks for it: 1 yes, 0 or unset no; anything else is an error said
    with the variable's name (it would otherwise be ignored in silence)."""
    value = environ.get(ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{ENV} must be 1 (stop with the launcher) or 0, got {value!r}")
    return value == "1"


def watch_parent(
    parent: int,
    on_gone: Callable[[], None],
    stopped: threading.Event,
    *,
    current_parent: Callable[[], int] = os.getppid,
    poll_s: float = POLL_S,
) -> threading.Thread:
    """Call ``on_gone`` once when this process's parent is no longer ``parent`` (checked every
    ``poll_s`` until ``stopped`` is set)."""

    def run() -> None:
        while not stopped.is_set():
            now = current_parent()
            if now != parent:
                log.warning("launcher %d is gone (parent now %d): stopping", parent, now)
                on_gone()
                return
            stopped.wait(poll_s)

    thread = threading.Thread(target=run, name="parent-watch", daemon=True)
    thread.start()
    return thread
