"""The API fixtures of tests/integration/api, for the replica endpoints' tests."""

from tests.integration.api.conftest import abc, api, settings

__all__ = ["abc", "api", "settings"]


# -- Spark DPC tests (tests/integration/ha/spark_dpc_support.py) --------------------------------
from collections.abc import Iterator

import pytest

from spark_jobs.runtime import StreamServer


@pytest.fixture
def dpc_servers() -> Iterator[dict[str, StreamServer]]:
    """Two producers (a, b) and the home of the fragment's output and of the injected clock."""
    made = {"a": StreamServer(), "b": StreamServer(), "home": StreamServer()}
    try:
        yield made
    finally:
        for server in made.values():
            server.shutdown()
