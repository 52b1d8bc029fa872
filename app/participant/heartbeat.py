"""The agent's heartbeats to the service, sent by a small process of the agent's own, at the
interval every answer names (``heartbeat_interval_seconds``), so that the registry's failure
sweeper (``app.participants.failures``) hears a live agent however busy it is.

Why a process, not a thread (measured by ``tests/integration/participant/
test_false_suspicion.py`` at load 28-40 on 2 cores): a heartbeat thread inside the agent, even
at a raised priority, waits for the agent's GIL, which a tick thread holds while it waits for a
CPU (a priority inversion); 100 ms x 3 windows then closed on a live agent every few seconds.
The HA drivers met the same and answer their heartbeats from a responder process
(``spark_jobs/ha/heartbeat.py``); this is that design for the agent-to-service direction:

- the sender is started by the agent (``ServiceHeartbeats``) with a pipe as its stdin: it exits
  at the pipe's end of file, i.e. when the agent is gone however it died (SIGKILL included), and
  asks for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``) as a second line;
- it holds a lease the agent renews by writing to the pipe every ``TICK_S``: an agent alive but
  hung (or stopped: SIGSTOP) for longer than ``lease_s`` is no longer heartbeated for;
- it raises its priority (nice -10, best effort) and does nothing else;
- an answer with ``fenced: true`` (the registry declared the participant failed) is written to
  its stdout as a line ``fenced``; the agent's loop then drops every fragment and replica it ran
  and rejoins (the registry's rule), between two ticks (``ServiceHeartbeats.settle``).

python -m app.participant.heartbeat --api URL [--endpoint grpc://...]  (key: FEDLOAD_API_KEY)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

import httpx

log = logging.getLogger("fedload.agent")

TICK_S = 0.2
# Longer than any stall of a live agent measured (below a second at load 40), short beside a
# failover: a hung agent stops being heartbeated for after this.
DEFAULT_LEASE_S = 3.0
NICE = -10
_PR_SET_PDEATHSIG = 1
HEARTBEAT_PATH = "/v1/participants/me/heartbeat"


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def send(
    http: httpx.Client,
    endpoint: str | None,
    lease_s: float,
    agent: IO[bytes],
    out: IO[str],
    interval: float = 1.0,
) -> int:
    """The sender's loop: a heartbeat every ``interval`` (paced from each one's start) while
    the agent's lease holds, until the agent's pipe ends."""
    selector = selectors.DefaultSelector()
    fd = agent.fileno()
    os.set_blocking(fd, False)
    selector.register(fd, selectors.EVENT_READ)
    renewed = due = time.monotonic()
    body = {"endpoint": endpoint} if endpoint else {}
    first = True
    while True:
        for _ in selector.select(timeout=max(0.0, due - time.monotonic())):
            try:
                data = os.read(fd, 4096)
            except BlockingIOError:
                continue
            if not data:
                return 0  # the agent is gone: so are its heartbeats
            renewed = time.monotonic()
        now = time.monotonic()
        if now < due:
            continue
        due = now + interval
        if now - renewed > lease_s:
            continue  # the agent is hung or stopped: say nothing for it
        try:
            answer = http.post(HEARTBEAT_PATH, json=body).json()
        except (httpx.HTTPError, ValueError):
            continue  # the service away or busy: the next beat tries again
        if os.environ.get("FEDLOAD_HEARTBEAT_TRACE"):  # diagnostics: when each beat was answered
            print(f"beat {time.time():.3f} {time.monotonic() - now:.3f}", file=sys.stderr)
        interval = float(answer.get("heartbeat_interval_seconds") or interval)
        due = now + interval
        if first:
            first = False
            out.write("up\n")  # the agent starts its ticks once heartbeats flow
            out.flush()
        if answer.get("fenced"):
            out.write("fenced\n")
            out.flush()


class ServiceHeartbeats:
    """The agent's side: starts the sender, renews its lease, and learns that it is fenced."""

    def __init__(
        self,
        api: str,
        key: str,
        endpoint: str | None,
        rejoin: Callable[[], object],
        *,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        if lease_s <= TICK_S:
            raise ValueError(f"heartbeat lease must exceed {TICK_S} s, got {lease_s}")
        self.fenced = threading.Event()
        self.up = threading.Event()
        self._rejoin = rejoin
        argv = [sys.executable, "-m", "app.participant.heartbeat", "--api", api]
        argv += ["--lease-s", str(lease_s)]
        if endpoint:
            argv += ["--endpoint", endpoint]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "FEDLOAD_API_KEY": key},
        )
        self._stopped = threading.Event()
        threading.Thread(target=self._renew, name="heartbeat-lease", daemon=True).start()
        threading.Thread(target=self._listen, name="heartbeat-answers", daemon=True).start()

    def _renew(self) -> None:
        assert self.proc.stdin is not None
        while not self._stopped.wait(TICK_S):
            try:
                self.proc.stdin.write(b".")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return

    def _listen(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == b"up":
                self.up.set()
            if line.strip() == b"fenced" and not self.fenced.is_set():
                log.warning("the registry declared this participant failed: fenced")
                self.fenced.set()

    def wait_up(self, timeout: float) -> bool:
        """Until the sender's first heartbeat was answered: an agent that ticked before then
        (its tick heartbeats once a second) would go silent for windows of 100 ms at start
        (seen: the sender took 4 s to start at load 55, and the agent was declared failed)."""
        return self.up.wait(timeout)

    def settle(self, drop_all: Callable[[], None]) -> bool:
        """If the registry fenced this participant: drop everything that ran here, then rejoin
        (the registry's rule). True when it did; the next tick runs what the registry says.
        Called by the agent's loop between ticks."""
        if not self.fenced.is_set():
            return False
        drop_all()
        self._rejoin()
        self.fenced.clear()
        log.warning("dropped every fragment and replica, and rejoined the federation")
        return True

    def close(self) -> None:
        self._stopped.set()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", required=True)
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--lease-s", type=float, default=DEFAULT_LEASE_S)
    args = parser.parse_args(argv)
    _die_with_parent()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the agent, which closes the pipe
    key = os.environ.get("FEDLOAD_API_KEY", "")
    with httpx.Client(
        base_url=args.api, headers={"Authorization": f"Bearer {key}"}, timeout=10.0
    ) as http:
        return send(http, args.endpoint, args.lease_s, sys.stdin.buffer, sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
