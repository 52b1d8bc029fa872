"""Start HA nodes as separate processes on loopback, talk to them, kill them, clean up.

Every process and proxy a ``Cluster`` starts is stopped by ``close()`` (also on errors), so a
failed scenario leaves nothing running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from app.availability import Message
from spark_jobs.ha.arbiter import ArbiterServer
from spark_jobs.ha.faultproxy import FaultProxy
from spark_jobs.ha.node import OUT
from spark_jobs.ha.wire import HAClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cluster:
    def __init__(self, workdir: Path, *, startup_seconds: float = 2.5) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The shared stime origin; set for real by start() once every node is up. Until then
        # nodes idle (their clock reads far before 0).
        self.startup_seconds = startup_seconds
        self.t0 = time.time() + 3600
        self.ports: dict[str, int] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.proxies: dict[str, FaultProxy] = {}
        self._logs: list[Any] = []
        # Replicas that cannot reach a peer ask it for their turn to reconcile.
        self.arbiter: ArbiterServer | None = None

    def now_ms(self) -> int:
        return int((time.time() - self.t0) * 1000)

    def sleep_until(self, ms: int) -> None:
        delay = self.t0 + ms / 1000 - time.time()
        if delay > 0:
            time.sleep(delay)

    def location(self, name: str) -> str:
        return f"grpc://127.0.0.1:{self.port(name)}"

    def port(self, name: str) -> int:
        if name not in self.ports:
            self.ports[name] = free_port()
        return self.ports[name]

    def proxy(self, link: str, target: str) -> FaultProxy:
        """A proxy for the link named ``link`` in front of node ``target``."""
        proxy = FaultProxy(self.port(target))
        self.proxies[link] = proxy
        return proxy

    def start(self, configs: dict[str, dict[str, Any]], timeout: float = 20.0) -> None:
        for name, config in configs.items():
            ready = self.workdir / f"{name}.ready"
            ready.unlink(missing_ok=True)
            full = {
                "name": name,
                "t0": self.t0,
                "port": self.port(name),
                "ready_file": str(ready),
                **config,
            }
            if config.get("peers") and "arbiter" not in config:
                full["arbiter"] = self.arbiter_location()
            path = self.workdir / f"{name}.json"
            path.write_text(json.dumps(full, indent=1))
            log = (self.workdir / f"{name}.log").open("wb")
            self._logs.append(log)
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "spark_jobs.ha.node", str(path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        for name in configs:
            while not (self.workdir / f"{name}.ready").exists():
                if self.procs[name].poll() is not None:
                    raise RuntimeError(
                        f"node {name} exited with {self.procs[name].returncode}; see "
                        f"{self.workdir / (name + '.log')}"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {name} did not start within {timeout} s")
                time.sleep(0.02)
        if self.t0 > time.time() + 60:
            self.t0 = time.time() + min(self.startup_seconds, 0.5)
        for name in configs:
            self.control(name, cmd="start", t0=self.t0)

    def arbiter_location(self) -> str:
        if self.arbiter is None:
            self.arbiter = ArbiterServer()
        return self.arbiter.location

    def arbiter_decisions(self) -> list[tuple[str, str, bool]]:
        return [] if self.arbiter is None else list(self.arbiter.leases.decisions)

    def call(self, name: str, kind: str, timeout: float = 2.0, **body: Any) -> Any:
        client = HAClient(self.location(name), timeout=timeout)
        try:
            return client.action(kind, **body)
        finally:
            client.close()

    def control(self, name: str, **body: Any) -> Any:
        return self.call(name, "ha_control", **body)

    def status(self, name: str, *, full: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = self.control(name, cmd="status", full=full)
        return result

    def output(self, name: str) -> list[Message]:
        client = HAClient(self.location(name), timeout=5.0)
        try:
            messages, _ = client.read(OUT, 0)
        finally:
            client.close()
        return messages

    def kill(self, name: str) -> None:
        """SIGKILL: no goodbye, no flush; the process's memory (its logs, its state) is gone."""
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=5)

    def cpu_seconds(self, name: str) -> float:
        """User + system CPU time the node's process has used so far (Linux /proc)."""
        fields = Path(f"/proc/{self.procs[name].pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        if self.arbiter is not None:
            self.arbiter.shutdown()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=3)
        for log in self._logs:
            with contextlib.suppress(Exception):
                log.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
