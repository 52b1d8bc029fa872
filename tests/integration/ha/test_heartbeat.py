"""The heartbeat responder with real processes: a stand-in host process starts it, as
spark_host does; the responder answers while the host lives, goes silent when the host is hung
past the lease, and exits when the host is SIGKILLed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from spark_jobs.ha.heartbeat import HeartbeatClient, Responder

HOST = """
import sys, time
from spark_jobs.ha.heartbeat import Responder
r = Responder(lease_s=float(sys.argv[1]))
print(r.port, r.proc.pid, flush=True)
time.sleep(600)
"""


@pytest.fixture
def host() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", HOST, "1.0"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port, responder_pid = (int(x) for x in proc.stdout.readline().split())
    yield proc, port, responder_pid
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    # The responder ends with its host (pipe EOF): nothing of the test outlives it.
    assert _gone(responder_pid, 10)


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True  # exited, waiting for init to reap it
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_answers_while_the_host_lives_and_exits_when_it_is_killed(host) -> None:
    proc, port, responder_pid = host
    client = HeartbeatClient(port)
    ages = [client.ping(5.0) for _ in range(5)]
    # The lease age is the time since the host's last renewal (every 0.2 s), in ms.
    assert all(0 <= age < 1000 for age in ages)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _gone(responder_pid, 10), "the responder outlived its SIGKILLed host"
    client.close()
    with pytest.raises(OSError):
        HeartbeatClient(port).ping(1.0)


def test_a_hung_host_is_not_answered_for_after_the_lease(host) -> None:
    proc, port, _ = host
    client = HeartbeatClient(port)
    client.ping(5.0)
    proc.send_signal(signal.SIGSTOP)  # alive, but renews nothing
    try:
        time.sleep(1.5)
        with pytest.raises(OSError):
            client.ping(1.0)
    finally:
        proc.send_signal(signal.SIGCONT)
    # Renewed again: answered again.
    deadline = time.monotonic() + 10
    while True:
        try:
            assert client.ping(1.0) < 1000
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_lease_must_exceed_the_tick() -> None:
    with pytest.raises(ValueError, match="lease_s"):
        Responder(lease_s=0.1)
