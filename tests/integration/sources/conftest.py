"""Helpers for the source tests: a real Flight log, and waiting on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from spark_jobs.runtime.transport import StreamServer

STREAM = "O.src.out"


@pytest.fixture
def server() -> Iterator[StreamServer]:
    made = StreamServer()
    made.log.declare(STREAM, 1.0)
    try:
        yield made
    finally:
        made.shutdown()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)
