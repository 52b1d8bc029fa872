"""A Spark host's heartbeat responder: a small process of its own that answers heartbeats for
the host, so that the host's Spark work cannot delay the answers, while it still dies with the
host and still travels the host's network link.

Why a process (measured by ``bench/ha/heartbeat_starvation.py`` on a running host from its
query's start, load average 11-12 on 2 cores; figures in the "Partition on Spark" section of
bench/ha/README.md). Every 100 ms the driver timed three heartbeats at once:
- the ``info`` action of B's Flight server and the ``ping`` of B's control server (two gRPC
  servers, two thread pools) were slow together: max 302-318 ms, 10-29 answers of 252-272
  over 100 ms (at load 2-6, measured after the first batches, none was: max 60 ms). Not a
  thread pool running out then (two pools, same tail), but what both share: the Python handler
  needs B's GIL. A B thread that only sleeps 5 ms at a time woke up late by up to 295-381 ms,
  more than a thread of the idle driver (184-228 ms): the rest of the stall is the GIL, held by
  the streaming query's py4j calls and the sink's Arrow conversions;
- the machine's CPU share is the other part: at load 11 even the idle driver's thread waited
  up to ~200 ms for a CPU, so a process of its own is not enough alone;
- this responder, a process of its own at nice 0: max 238 ms (p99 144 ms); at nice -10: max
  140 ms, p99 102 ms, median 0.4 ms, with the same Flight answers at max 310 ms. What is left
  is mostly the asking side's own wait for a CPU.
No thread inside the host can be made immune to its GIL, hence a process, at a raised priority.

The responder:
- is started by the host (``Responder``) with a pipe as its stdin; it exits at the pipe's
  end of file, i.e. as soon as the host process is gone however it died (SIGKILL included), and
  also asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``) as a second line;
  being in the host's session, a kill of the session takes it too;
- answers on its own TCP port; the retired ``spark_partition`` driver put that port behind a
  fault proxy cut and healed with the data link's (one cable, two ports), so a cut silenced it;
- holds a lease the host renews by writing to the pipe every ``TICK_S``: a host process that is
  alive but hung for longer than ``lease_s`` (far beyond any stall measured, which is below a
  second) is no longer answered for, so the detector sees it as failed, only later;
- is one thread on ``selectors``: nothing else runs in its interpreter.

Protocol: the client sends one byte per heartbeat; the responder answers 4 bytes, big-endian, the
milliseconds since the host's last lease renewal (diagnostics: what the host's own stalls were).

python -m spark_jobs.ha.heartbeat --lease-s 5   (stdin: the host's pipe; prints its port)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import IO

TICK_S = 0.2
DEFAULT_LEASE_S = 5.0
# The responder's scheduling priority when the system allows raising it (root, CAP_SYS_NICE):
# on a machine loaded past its cores, even a process that does nothing but answer waits for a
# CPU for up to ~240 ms (measured); a higher weight gets it one on wake-up. It uses next to no
# CPU, so it takes nothing measurable from the host's work.
NICE = -10
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux only: SIGKILL this process when its parent thread ends (best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _raise_priority() -> int:
    """Best effort: the responder's niceness after trying ``NICE`` (unchanged if refused)."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    return os.getpriority(os.PRIO_PROCESS, 0)


def serve(lease_s: float, host_pipe: IO[bytes], out: IO[str]) -> int:
    """The responder's loop: until the host's pipe ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    out.write(f"{listener.getsockname()[1]}\n")
    out.flush()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    pipe_fd = host_pipe.fileno()
    os.set_blocking(pipe_fd, False)
    selector.register(pipe_fd, selectors.EVENT_READ, "host")
    renewed = time.monotonic()
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.data == "host":
                try:
                    data = os.read(pipe_fd, 4096)
                except BlockingIOError:
                    continue
                if not data:
                    return 0  # the host is gone: so is its heartbeat
                renewed = time.monotonic()
            elif key.data == "accept":
                with contextlib.suppress(BlockingIOError):
                    conn, _ = listener.accept()
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    selector.register(conn, selectors.EVENT_READ, "peer")
            else:
                peer = key.fileobj
                assert isinstance(peer, socket.socket)
                try:
                    asked = peer.recv(64)
                except BlockingIOError:
                    continue
                except OSError:
                    asked = b""
                age = time.monotonic() - renewed
                if not asked or age > lease_s:
                    # A closed peer, or a hung host: no answer, the connection closes.
                    selector.unregister(peer)
                    peer.close()
                    continue
                # One answer per byte asked (a client that timed out may have asked twice).
                answer = struct.pack(">I", min(int(age * 1000), 2**32 - 1))
                with contextlib.suppress(OSError):
                    peer.sendall(answer * len(asked))


class Responder:
    """The host's side: starts the responder and renews its lease from a daemon thread."""

    def __init__(self, lease_s: float = DEFAULT_LEASE_S) -> None:
        if lease_s <= TICK_S:
            raise ValueError(f"Responder: lease_s must exceed the tick {TICK_S} s, got {lease_s}")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spark_jobs.ha.heartbeat", "--lease-s", str(lease_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=False,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip():
            raise RuntimeError(f"heartbeat responder exited with {self.proc.wait()}")
        self.port = int(line)
        self.location = f"tcp://127.0.0.1:{self.port}"
        self._pipe = self.proc.stdin
        self._stopped = threading.Event()
        threading.Thread(target=self._renew, name="heartbeat-lease", daemon=True).start()

    def _renew(self) -> None:
        while not self._stopped.wait(TICK_S):
            try:
                self._pipe.write(b".")
                self._pipe.flush()
            except (OSError, ValueError):
                return

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError, ValueError):
            self._pipe.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def port_of(location: str) -> int:
    return int(location.rsplit(":", 1)[1])


class HeartbeatClient:
    """One peer's end: ``ping`` sends a heartbeat and waits for its answer at most ``timeout``.

    A failed or late ping drops the connection (a late answer must not be taken for the next
    one's), and the next ping connects again."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.address = (host, port)
        self._sock: socket.socket | None = None

    def ping(self, timeout: float) -> int:
        """The host's lease age in ms; ``OSError`` (``TimeoutError`` among them) on silence."""
        deadline = time.monotonic() + timeout
        try:
            if self._sock is None:
                self._sock = socket.create_connection(self.address, timeout=timeout)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = self._sock
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(b"?")
            answer = b""
            while len(answer) < 4:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                chunk = sock.recv(4 - len(answer))
                if not chunk:
                    raise ConnectionResetError(f"heartbeat {self.address}: closed")
                answer += chunk
            age: int = struct.unpack(">I", answer)[0]
            return age
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lease-s", type=float, default=DEFAULT_LEASE_S)
    args = parser.parse_args(argv)
    _die_with_parent()
    _raise_priority()
    # Closed stdin at once if the parent died before prctl took effect: the loop sees EOF.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return serve(args.lease_s, sys.stdin.buffer, sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
