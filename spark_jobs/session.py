"""One place that builds SparkSessions, so tests, the demo and the what-if job agree on settings.

Addresses come from the caller, never from code: ``driver_host`` is the address executors (and a
standalone master) reach the driver at, ``bind_address`` the interface it listens on. Both
default to loopback, which is what local mode, the demo and the tests need; ``spark.driver.host``
and ``spark.driver.bindAddress`` in ``extra`` win over both.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from pyspark.sql import SparkSession

from app.java import require_java, with_quick_jit
from spark_jobs.code_archive import code_archive

LOOPBACK = "127.0.0.1"
WILDCARDS = ("0.0.0.0", "::")
# Set on a session built for a cluster master: seconds to wait for the first executor before
# giving up with a clear error (Spark itself would queue every job forever, "Initial job has
# not accepted any resources").
EXECUTOR_WAIT_KEY = "spark.fedload.executorWaitSeconds"
DEFAULT_EXECUTOR_WAIT_S = 90.0


class SparkUnavailable(RuntimeError):
    """The cluster named by the master URL gave this driver no executor."""


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def driver_addresses(bind_address: str | None, driver_host: str | None) -> tuple[str, str]:
    """(bind address, advertised host) of the driver: loopback unless given; the host defaults
    to the bind address, which must then be one executors can reach."""
    bind = bind_address or LOOPBACK
    host = driver_host or bind
    if host in WILDCARDS:
        raise ValueError(
            f"spark.driver.host {host!r} is no address executors can reach: give the driver's "
            "advertised address (e.g. the agent's --advertise host)"
        )
    return bind, host


def build_session(
    *,
    app_name: str = "fedload",
    master: str | None = None,
    shuffle_partitions: int = 4,
    extra: dict[str, str] | None = None,
    driver_host: str | None = None,
    bind_address: str | None = None,
    ship_code: bool | None = None,
) -> SparkSession:
    """``ship_code`` (default: on for any master but local) adds a zip of fedload's packages to
    ``spark.submit.pyFiles``, so executors on workers without fedload installed import it."""
    extra = with_quick_jit(dict(extra or {}))
    # Say in one line that Java is missing (and how to install it) instead of PySpark's
    # launcher failing with JAVA_GATEWAY_EXITED after the shell script's own messages.
    require_java()
    # Executors must run the same interpreter as the driver, or pickled closures break.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    bind, host = driver_addresses(
        extra.pop("spark.driver.bindAddress", None) or bind_address,
        extra.pop("spark.driver.host", None) or driver_host,
    )
    # The JVM resolves its own host name through SPARK_LOCAL_IP (only the first session in a
    # process starts the JVM). An address the caller gave must win over one inherited from a
    # parent process on another host (or network namespace).
    local_ip = host if bind in WILDCARDS else bind
    if driver_host or bind_address:
        os.environ["SPARK_LOCAL_IP"] = local_ip
    else:
        os.environ.setdefault("SPARK_LOCAL_IP", local_ip)
    master = master or os.environ.get("SPARK_MASTER", "local[*]")
    wait_s = float(extra.pop(EXECUTOR_WAIT_KEY, DEFAULT_EXECUTOR_WAIT_S))
    # Spark's standalone client retries an unreachable master for 60 s (3 x 20 s, not
    # configurable) before it gives up, inside getOrCreate: know first, within our own wait.
    _wait_for_master(master, wait_s)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", bind)
        .config("spark.driver.host", host)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        # Each batch commits a changelog of the keys it changed instead of uploading a RocksDB
        # snapshot (one every 10 versions, in the background): a smaller checkpoint delta per
        # batch, so passive standby ships less and a move packs less.
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    )
    if ship_code if ship_code is not None else not is_local(master):
        shipped = [str(code_archive())]
        if extra.get("spark.submit.pyFiles"):
            shipped.append(extra.pop("spark.submit.pyFiles"))
        builder = builder.config("spark.submit.pyFiles", ",".join(shipped))
    for key, value in extra.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if not is_local(master):
        _wait_for_executor(session, master, wait_s)
    return session


def executor_count(session: SparkSession) -> int:
    """Executors registered with this driver (the driver's own block manager not counted)."""
    status = session.sparkContext._jsc.sc().getExecutorMemoryStatus()
    return int(status.size()) - 1


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) of each master a ``spark://`` URL names (``spark://h1:7077,h2:7077`` for
    standby masters); none for any other kind of master."""
    if not master.startswith("spark://"):
        return []
    found = []
    for entry in master.removeprefix("spark://").split(","):
        host, colon, port = entry.strip().rpartition(":")
        if not colon or not port.isdigit():
            host, port = entry.strip(), "7077"
        found.append((host.strip("[]"), int(port)))
    return found


def _wait_for_master(master: str, wait_s: float) -> None:
    """Until one of the URL's masters accepts a connection, at most ``wait_s``."""
    addresses = master_addresses(master)
    if not addresses:
        return
    deadline = time.monotonic() + wait_s
    while True:
        for address in addresses:
            try:
                with socket.create_connection(address, timeout=2.0):
                    return
            except OSError:
                continue
        if time.monotonic() >= deadline:
            raise SparkUnavailable(
                f"no Spark master accepted a connection at {master} within {wait_s:.0f} s: is "
                f"the master running there, and reachable from this host? (the wait is "
                f"{EXECUTOR_WAIT_KEY})"
            )
        time.sleep(0.25)


def _wait_for_executor(session: SparkSession, master: str, wait_s: float) -> None:
    driver = session.conf.get("spark.driver.host", "?")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if executor_count(session) > 0:
            return
        time.sleep(0.25)
    session.stop()
    raise SparkUnavailable(
        f"no executor registered with this driver from {master} within {wait_s:.0f} s: is the "
        "master running, with a worker that has free cores and memory, and can the workers "
        f"reach the driver at {driver}? "
        f"(the wait is {EXECUTOR_WAIT_KEY})"
    )
