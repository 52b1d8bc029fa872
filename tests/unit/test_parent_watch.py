"""An agent or service started by a driver stops once the driver is gone (``app.parent_watch``):
the rule on an injected parent, then with real processes and a SIGKILL of the launcher."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from app.parent_watch import ENV, wanted, watch_parent


def test_the_variable_says_1_or_0_and_nothing_else() -> None:
    assert wanted({ENV: "1"})
    assert not wanted({ENV: "0"})
    assert not wanted({})
    with pytest.raises(ValueError, match=f"{ENV} must be 1 .* got 'yes'"):
        wanted({ENV: "yes"})


def test_on_gone_is_called_once_when_the_parent_changes() -> None:
    parents = iter([100, 100, 1, 1, 1])
    called: list[int] = []
    stopped = threading.Event()
    thread = watch_parent(
        100, lambda: called.append(1), stopped, current_parent=lambda: next(parents), poll_s=0.01
    )
    thread.join(5)
    assert not thread.is_alive()
    assert called == [1]


def test_a_stopped_watch_calls_nothing() -> None:
    stopped = threading.Event()
    stopped.set()
    called: list[int] = []
    watch_parent(100, lambda: called.append(1), stopped, current_parent=lambda: 1).join(5)
    assert called == []


CHILD = textwrap.dedent(
    """
    import os, sys, threading
    from pathlib import Path
    from app.parent_watch import watch_parent
    stopped = threading.Event()
    watch_parent(os.getppid(), stopped.set, threading.Event(), poll_s=0.05)
    Path(sys.argv[1]).write_text("watching")
    stopped.wait(30)
    Path(sys.argv[1]).write_text("stopped" if stopped.is_set() else "timed out")
    """
)

LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    print(child.pid, flush=True)
    time.sleep(60)
    """
)


def test_the_child_stops_when_its_launcher_is_killed(tmp_path: Path) -> None:
    marker = tmp_path / "child"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, CHILD, str(marker)], stdout=subprocess.PIPE, env=env
    )
    assert launcher.stdout is not None
    child = int(launcher.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == "watching"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        while marker.read_text() == "watching" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == "stopped"
    finally:
        launcher.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
