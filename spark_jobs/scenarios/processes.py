"""A federation of real processes: ``fedload serve`` and one ``fedload agent`` per participant.

The demo, the crash tests and the move benchmark compose the product's own commands here; none
re-implements a participant. The registry is migrated and the federation file applied from this
process (that is how the participants' API keys are learnt, as an admin would); everything after
that goes through the service's REST API and the agents' endpoints.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from app.db.migrate import upgrade
from app.db.session import dispose_engines, unit_of_work
from app.federation.apply import apply_federation
from app.federation.document import FederationDoc
from app.parent_watch import ENV as STOP_WITH_PARENT
from app.participant.client import FedloadClient

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _python_env(extra: Mapping[str, str], placement: Placement | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    if placement is None or placement.address == LOOPBACK:
        env.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    else:
        # The parent's address means nothing on another host: the agent sets its own.
        env.pop("SPARK_LOCAL_IP", None)
    env.update(extra)
    return env


@dataclass(frozen=True)
class Placement:
    """Where one process of the federation runs: its address, a command prefix that puts it on
    its host (``ip netns exec NS`` for a network namespace; empty: this machine), a fixed port
    (a host of its own has every port free; None: a free one on loopback), extra arguments
    (an agent's ``--spark-master``, say) and extra environment (an agent's fault injection)."""

    address: str = LOOPBACK
    prefix: tuple[str, ...] = ()
    port: int | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass
class Managed:
    """One child process of the federation, restartable with the same arguments."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None
    # The pid ask_to_stop sent SIGTERM to (a restart makes a new process).
    _asked: int | None = None

    def start(self) -> Managed:
        self._log = self.log_path.open("ab")
        # Agents and the service stop when this driver is gone, however it went (app.parent_watch).
        env = {**self.env, STOP_WITH_PARENT: "1"}
        self.process = subprocess.Popen(
            self.argv, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no clean-up, as a crashed machine."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._close_log()

    def ask_to_stop(self) -> None:
        """SIGTERM without waiting: the process stops cleanly in its own time."""
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGTERM)
            self._asked = self.process.pid

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (unless ``ask_to_stop`` sent it already: agents sent a second one while they
        stopped cleanly exited by the signal, -15, in a CI run), then wait for a clean exit
        (SIGKILL after ``timeout``)."""
        if self.process is None:
            return None
        if self.alive():
            if self._asked != self.process.pid:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_log()
        return self.process.returncode

    def restart(self) -> Managed:
        self.kill()
        return self.start()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 30) -> str:
        """The log's last ``lines`` lines, each run of JVM stack frames folded into one line: a
        Java trace is a hundred frames, and a tail of frames hides the message that says what
        failed (a failed CI run printed nothing else)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(fold_stack_frames(text.splitlines())[-lines:])


_STACK_FRAME = re.compile(r"^\s+(at \S|\.\.\. \d+ more)")


def fold_stack_frames(lines: Sequence[str]) -> list[str]:
    folded: list[str] = []
    frames = 0
    for line in [*lines, ""]:
        if _STACK_FRAME.match(line):
            frames += 1
            continue
        if frames:
            folded.append(f"        [{frames} stack frames]")
            frames = 0
        folded.append(line)
    return folded[:-1]


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class AgentSettings:
    interval: float = 1.0
    offer_interval: float = 7.0
    hysteresis: float = 0.01
    spark_eager: bool = False
    extra_args: tuple[str, ...] = ()


@dataclass
class ProcessFederation:
    """Start with ``start()``; ``close()`` (or the context manager) stops every process."""

    doc: FederationDoc
    work: Path
    database_url: str | None = None
    lease_seconds: float = 60.0
    # Agents heartbeat once per tick, and a tick that carries a move takes a few seconds.
    heartbeat_interval: float = 2.0
    admin_key: str = "federation-admin-key"
    agent_settings: AgentSettings = field(default_factory=AgentSettings)
    # Where the service and each agent run (default: loopback on this machine).
    service_placement: Placement = field(default_factory=Placement)
    placements: dict[str, Placement] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    agents: dict[str, Managed] = field(default_factory=dict)
    service: Managed | None = None
    url: str = ""
    _ports: dict[str, int] = field(default_factory=dict)

    def __enter__(self) -> ProcessFederation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def registry_url(self) -> str:
        return self.database_url or f"sqlite:///{self.work / 'registry.db'}"

    def start(self) -> ProcessFederation:
        self.work.mkdir(parents=True, exist_ok=True)
        upgrade(self.registry_url)
        with unit_of_work(self.registry_url) as session:
            self.keys = apply_federation(
                session, self.doc, actor=f"file:{self.doc.source}"
            ).new_keys
        dispose_engines(self.registry_url)
        where = self.service_placement
        port = where.port or free_port()
        self.url = f"http://{where.address}:{port}"
        self.service = Managed(
            "service",
            [
                *where.prefix,
                sys.executable,
                "-m",
                "app",
                "serve",
                "--host",
                where.address,
                "--port",
                str(port),
                *where.args,
            ],
            _python_env(
                {
                    "DATABASE_URL": self.registry_url,
                    "FEDLOAD_ADMIN_KEY": self.admin_key,
                    "FEDLOAD_ENVIRONMENT": "development",
                    "FEDLOAD_MOVEMENT_LEASE_SECONDS": str(self.lease_seconds),
                    "FEDLOAD_HEARTBEAT_INTERVAL_SECONDS": str(self.heartbeat_interval),
                    # The federation's own data-plane signing key, made at the first token.
                    "FEDLOAD_DATAPLANE_KEY_FILE": str(self.work / "dataplane-signing-key.pem"),
                },
                where,
            ),
            self.work / "service.log",
        ).start()
        self.wait_for_service()
        return self

    def wait_for_service(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.service is not None
            if not self.service.alive():
                raise RuntimeError(f"fedload serve exited:\n{self.service.tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"fedload serve did not answer within {timeout} s")

    def admin(self) -> FedloadClient:
        return FedloadClient(self.url, self.admin_key)

    def client(self, participant: str) -> FedloadClient:
        return FedloadClient(self.url, self.keys[participant])

    def start_agent(
        self,
        name: str,
        *,
        env: Mapping[str, str] | None = None,
        spark_eager: bool | None = None,
    ) -> Managed:
        """Start (or start again, on the same endpoint and data directory) ``name``'s agent.
        ``spark_eager``: this start's choice (None: the federation's ``agent_settings``)."""
        settings = self.agent_settings
        eager = settings.spark_eager if spark_eager is None else spark_eager
        where = self.placements.get(name, Placement())
        port = self._ports.setdefault(name, where.port or free_port())
        data = self.work / "agents" / name
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            *where.prefix,
            sys.executable,
            "-m",
            "app",
            "agent",
            "--participant",
            name,
            "--api",
            self.url,
            "--key",
            self.keys[name],
            "--listen",
            f"{where.address}:{port}",
            "--data-dir",
            str(data),
            "--interval",
            str(settings.interval),
            "--offer-interval",
            str(settings.offer_interval),
            "--hysteresis",
            str(settings.hysteresis),
            *(["--spark-eager"] if eager else []),
            *settings.extra_args,
            *where.args,
        ]
        previous = self.agents.get(name)
        if previous is not None:
            previous.kill()
        extra = {**dict(where.env), **dict(env or {})}
        agent = Managed(name, argv, _python_env(extra, where), data / "agent.log")
        self.agents[name] = agent.start()
        return agent

    def data_dir(self, name: str) -> Path:
        return self.work / "agents" / name

    def moves(self) -> Iterator[dict[str, Any]]:
        """Every move an agent recorded (taker's view: state bytes, phase timings, and the
        first batch at the new host once it came)."""
        for name in sorted(self.agents):
            first = {
                row["movement_id"]: row["first_batch"]
                for row in _json_lines(self.data_dir(name) / "first_batches.jsonl")
            }
            for move in _json_lines(self.data_dir(name) / "events.jsonl"):
                if move["movement_id"] in first:
                    move["timings"]["first_batch"] = first[move["movement_id"]]
                yield move

    def processes(self) -> dict[str, int]:
        found = {name: agent.pid for name, agent in self.agents.items() if agent.process}
        if self.service is not None and self.service.process is not None:
            found["service"] = self.service.pid
        return found

    def stop_agents(self, names: Sequence[str], timeout: float = 30.0) -> list[int | None]:
        """SIGTERM to every named agent at once, then wait for each (SIGKILL after
        ``timeout``): their exit statuses, in order. Each one's clean stop (its tick, its
        queries' last batches, its Spark) takes seconds, and they need not take turns."""
        for name in names:
            self.agents[name].ask_to_stop()
        return [self.agents[name].terminate(timeout) for name in names]

    def close(self, agents: Sequence[str] | None = None) -> None:
        self.stop_agents(agents or list(self.agents))
        if agents is None and self.service is not None:
            self.service.terminate()
