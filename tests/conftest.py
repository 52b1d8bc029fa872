"""Shared fixtures: one SparkSession per test run, and databases migrated with Alembic.

Database fixtures live in tests/support/databases.py; the Spark fixture is here because every
Spark test in every folder shares the one session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.components import require_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytest_plugins = ["tests.support.databases"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    require_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_jobs.session import build_session

    session = build_session(app_name="fedload-tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()
