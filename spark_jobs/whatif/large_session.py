"""The Spark session of a what-if run: sized for the federation, and failing loudly, never hanging.

``fedload whatif --large 100000 --k 10`` used to exhaust Spark's default 1 GB driver heap and
then wait forever: a JVM out of memory stays alive with a dead thread, and the Python side
waits for an answer that never comes. Here the session is started with a driver heap sized
for the federation and ``-XX:+ExitOnOutOfMemoryError``, so an exhausted JVM exits; the Python
side then gets a Py4J error at once, which ``spark_failures`` turns into one clear message.

``--spark-master`` and ``--spark-conf KEY=VALUE`` (``fedload whatif``) reach the session here;
a user's setting always wins over the sizing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

# Driver heap for the large run. The rounds keep no per-round tables in the JVM: it holds the
# edge table (both directions of every contract, ~32 bytes a row) once as the driver's input
# and, in local mode, once in the executors' cache, plus each pass's Arrow batches in flight;
# so a flat base with a small share per million edge rows (1,165 MB at 100,000 participants x
# 10 contracts, bench/whatif/README.md "Large rounds").
BASE_HEAP_MB = 1024
HEAP_MB_PER_MILLION_EDGES = 128
MAX_DEFAULT_HEAP_MB = 4096
OOM_EXIT = "-XX:+ExitOnOutOfMemoryError"


class SparkRunError(RuntimeError):
    """A Spark job that failed (or a JVM that died) during a what-if run."""


class SparkConfError(ValueError):
    """A ``--spark-conf`` value that is not KEY=VALUE."""


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    """``["spark.driver.memory=2g", ...]`` as a dict; a malformed pair is named in the error."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SparkConfError(f"--spark-conf {pair!r}: expected KEY=VALUE")
        conf[key.strip()] = value.strip()
    return conf


def driver_heap_mb(participants: int, contracts: int) -> int:
    """Driver heap (MB) for a large federation: flat base plus the edge table's share."""
    edges = 2 * max(contracts, 0) + max(participants, 0)
    sized = BASE_HEAP_MB + math.ceil(HEAP_MB_PER_MILLION_EDGES * edges / 1_000_000)
    return min(sized, MAX_DEFAULT_HEAP_MB)


def session_conf(
    user: dict[str, str], *, participants: int = 0, contracts: int = 0
) -> dict[str, str]:
    """The settings a what-if session starts with: sizing and OOM exit, then the user's."""
    conf = dict(user)
    conf.setdefault("spark.driver.memory", f"{driver_heap_mb(participants, contracts)}m")
    options = conf.get("spark.driver.extraJavaOptions", "")
    if OOM_EXIT not in options:
        conf["spark.driver.extraJavaOptions"] = f"{options} {OOM_EXIT}".strip()
    return conf


@contextmanager
def whatif_session(
    master: str | None,
    user_conf: dict[str, str],
    *,
    app_name: str,
    participants: int = 0,
    contracts: int = 0,
    shuffle_partitions: int = 8,
) -> Iterator[Any]:
    """Start (and finally stop) the run's SparkSession; jobs inside borrow it as the active one.

    Driver memory only takes effect when this process starts the JVM, so a session that is
    already active (a test's warm one) is used as it is and left running.
    """
    from pyspark.sql import SparkSession

    from spark_jobs.session import build_session

    if SparkSession.getActiveSession() is not None:
        yield SparkSession.getActiveSession()
        return
    conf = session_conf(user_conf, participants=participants, contracts=contracts)
    with spark_failures():
        session = build_session(
            app_name=app_name, master=master, shuffle_partitions=shuffle_partitions, extra=conf
        )
    try:
        yield session
    finally:
        # The JVM may already be gone (the run's own error is what the user needs to see).
        with suppress(Exception):
            session.stop()


@contextmanager
def spark_failures() -> Iterator[None]:
    """Turn a failed Spark job or a dead JVM into ``SparkRunError`` with a readable message."""
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
    from pyspark.errors import PySparkException

    try:
        yield
    except Py4JJavaError as exc:
        raise SparkRunError(f"Spark failed: {_first_line(exc.java_exception)}") from exc
    except (Py4JNetworkError, ConnectionError) as exc:
        raise SparkRunError(
            "the Spark driver (JVM) died during the run, usually out of memory; give it more "
            "with --spark-conf spark.driver.memory=8g"
        ) from exc
    except Py4JError as exc:
        raise SparkRunError(
            f"lost the Spark driver (JVM): {_first_line(exc)}; if it ran out of memory, give it "
            "more with --spark-conf spark.driver.memory=8g"
        ) from exc
    except PySparkException as exc:
        raise SparkRunError(f"Spark refused the job: {_first_line(exc)}") from exc


def _first_line(error: object) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
