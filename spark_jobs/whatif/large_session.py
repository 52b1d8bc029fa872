"""The Spark session of a what-if run: one fixed driver heap, and failing loudly, never hanging.

``fedload whatif --large 100000 --k 10`` used to exhaust Spark's default 1 GB driver heap and
then wait forever: a JVM out of memory stays alive with a dead thread, and the Python side
waits for an answer that never comes. The rounds no longer pass the contracts through the
driver's JVM (``spark_jobs/whatif/large.py``), so one heap, whatever the federation's size,
serves; the session starts with ``-XX:+ExitOnOutOfMemoryError`` all the same, so an exhausted
JVM exits, the Python side gets a Py4J error at once, and ``spark_failures`` turns it into one
clear message.

``--spark-master`` and ``--spark-conf KEY=VALUE`` (``fedload whatif``) reach the session here;
a user's setting always wins.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

# Driver heap for a what-if run, whatever the federation's size: the large rounds keep the
# contracts out of the driver's JVM (``spark_jobs/whatif/large.py``); what it holds per pass is
# one broadcast and one result row per participant at most (a few MB at 100,000), beside Spark's
# own working set (bench/whatif/README.md "Large rounds": heap used at 10,000-100,000).
DRIVER_HEAP_MB = 1024
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


def session_conf(user: dict[str, str]) -> dict[str, str]:
    """The settings a what-if session starts with: the fixed heap and OOM exit, then the user's."""
    conf = dict(user)
    conf.setdefault("spark.driver.memory", f"{DRIVER_HEAP_MB}m")
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
    conf = session_conf(user_conf)
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
