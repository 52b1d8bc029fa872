"""Spark's Python processes import the installed pyspark (with bytecode), not pyspark.zip, which
Spark puts first on their path: compiled at every start, the zip cost a streaming source runner
three times the CPU, and under CI load runners missed the JVM's 10 s to connect back
(``spark_jobs.worker_path``). ``make venv`` installs the hook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from spark_jobs.worker_path import HOOK_LINE, KEEP_ZIPS, hook_path, installed

PRINT_PACKAGES = "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"
SPARK_ZIPS = Path(pyspark.__file__).parent / "python" / "lib"


def test_the_environment_has_the_hook() -> None:
    assert installed(), f"{hook_path()} is missing or stale: run `make venv`"
    assert hook_path().read_text() == HOOK_LINE


def test_a_process_started_as_spark_starts_them_imports_the_installed_package() -> None:
    # Spark's PYTHONPATH for its Python processes: its zips first (PythonUtils.sparkPythonPath).
    zips = sorted(str(p) for p in SPARK_ZIPS.glob("*.zip"))
    assert any(z.endswith("pyspark.zip") for z in zips) and len(zips) == 2, zips
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(zips)}
    found = subprocess.run(
        [sys.executable, "-c", PRINT_PACKAGES],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == [pyspark.__file__, str(Path(found[1]))] and ".zip" not in "".join(found), found


def test_the_way_out_keeps_spark_s_zips() -> None:
    zips = sorted(str(p) for p in SPARK_ZIPS.glob("*.zip"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(zips), KEEP_ZIPS: "1"}
    found = subprocess.run(
        [sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert found.startswith(str(SPARK_ZIPS / "pyspark.zip")), found


@pytest.mark.spark
def test_spark_s_own_python_workers_import_the_installed_package(spark) -> None:
    where = F.udf(lambda _: __import__("pyspark").__file__, StringType())
    files = {row[0] for row in spark.range(2).select(where("id")).collect()}
    assert files == {pyspark.__file__}, files
