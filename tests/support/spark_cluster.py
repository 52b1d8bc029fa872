"""A real Spark standalone cluster on this machine, started from the pyspark package.

``$SPARK_HOME/bin/spark-class`` runs Spark's own master and worker daemons (``SPARK_HOME`` is the
pyspark package directory, which ships them). Small on purpose: daemons with 256 MB heaps, each
worker offering a few cores and 1 GB, everything on loopback with free ports, and all of it
stopped when the context ends, whatever happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from spark_jobs.scenarios.processes import free_port

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 180.0  # two JVMs on a machine shared by eight engineers


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def cluster_problem() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java: Spark's master and workers are JVMs"
    if not (spark_home() / "bin" / "spark-class").exists():
        return f"{spark_home()}/bin/spark-class is missing from the pyspark package"
    return None


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class StandaloneCluster:
    """A master and its workers; ``url`` is what ``--spark-master`` takes."""

    name: str
    work: Path
    url: str = ""
    ui: str = ""
    daemons: list[_Daemon] = field(default_factory=list)

    def worker_dirs(self) -> list[Path]:
        return sorted((self.work / "workers").glob("*"))

    def shipped_archives(self) -> list[Path]:
        """Zips of fedload's code that executors of this cluster fetched (spark.submit.pyFiles
        lands in each executor's working directory)."""
        return sorted((self.work / "workers").rglob("fedload-*.zip"))

    def alive_workers(self) -> int:
        state = httpx.get(f"{self.ui}/json/", timeout=5).json()
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def logs(self) -> str:
        return "\n".join(f"--- {d.name} ---\n{d.tail()}" for d in self.daemons)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_DAEMON_MEMORY="256m",
        PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def _start(name: str, work: Path, *argv: str) -> _Daemon:
    log_path = work / f"{name}.log"
    log = log_path.open("ab")
    process = subprocess.Popen(
        [str(spark_home() / "bin" / "spark-class"), *argv],
        env=_env(),
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return _Daemon(name, process, log_path, log)


@contextmanager
def standalone_cluster(
    name: str, work: Path, *, workers: int = 1, cores: int = 2, memory: str = "1g"
) -> Iterator[StandaloneCluster]:
    work.mkdir(parents=True, exist_ok=True)
    cluster = StandaloneCluster(name, work)
    with ExitStack() as stack:
        stack.callback(_stop_all, cluster)
        port, ui_port = free_port(), free_port()
        cluster.url, cluster.ui = f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{ui_port}"
        cluster.daemons.append(
            _start(
                f"{name}-master",
                work,
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            )
        )
        for index in range(workers):
            worker_dir = work / "workers" / str(index)
            worker_dir.mkdir(parents=True, exist_ok=True)
            cluster.daemons.append(
                _start(
                    f"{name}-worker{index}",
                    work,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    LOOPBACK,
                    "--webui-port",
                    str(free_port()),
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--work-dir",
                    str(worker_dir),
                    cluster.url,
                )
            )
        _wait_for_workers(cluster, workers)
        yield cluster


def _stop_all(cluster: StandaloneCluster) -> None:
    for daemon in reversed(cluster.daemons):
        daemon.stop()


def _wait_for_workers(cluster: StandaloneCluster, workers: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    last: object = None
    while time.monotonic() < deadline:
        dead = [d.name for d in cluster.daemons if d.process.poll() is not None]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited:\n{cluster.logs()}")
        try:
            if cluster.alive_workers() >= workers:
                return
        except (httpx.HTTPError, ValueError) as error:
            last = error
        time.sleep(0.5)
    raise TimeoutError(
        f"{cluster.name}: {workers} worker(s) not alive within {START_TIMEOUT_S} s "
        f"(last: {last!r})\n{cluster.logs()}"
    )
