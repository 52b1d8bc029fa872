"""A session for a standalone master that nobody answers at fails within fedload's own wait, with
the reason, before any JVM starts (spark_jobs/session.py); Spark alone retries for 60 s."""

from __future__ import annotations

import socket
import time

import pytest

from spark_jobs.session import (
    EXECUTOR_WAIT_KEY,
    SparkUnavailable,
    _wait_for_master,
    build_session,
    master_addresses,
)


def test_master_urls_name_every_standby_master_and_only_spark_urls_are_checked():
    assert master_addresses("spark://10.0.0.1:7077") == [("10.0.0.1", 7077)]
    assert master_addresses("spark://a:7077, b:7078") == [("a", 7077), ("b", 7078)]
    assert master_addresses("spark://[::1]:7000") == [("::1", 7000)]
    assert master_addresses("spark://master") == [("master", 7077)]
    assert master_addresses("local[2]") == master_addresses("yarn") == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unanswered_master_fails_the_session_within_the_wait_before_spark_starts():
    master = f"spark://127.0.0.1:{_closed_port()}"
    began = time.monotonic()
    with pytest.raises(SparkUnavailable, match=rf"no Spark master .* at {master} within 1 s"):
        build_session(master=master, extra={EXECUTOR_WAIT_KEY: "1"})
    assert time.monotonic() - began < 10


def test_a_master_that_accepts_connections_is_waited_for_no_longer():
    with socket.create_server(("127.0.0.1", 0)) as listening:
        master = f"spark://127.0.0.1:{listening.getsockname()[1]}"
        began = time.monotonic()
        _wait_for_master(master, 30.0)
        assert time.monotonic() - began < 5
