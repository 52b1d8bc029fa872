"""The what-if Spark session's settings (spark_jobs/whatif/large_session.py), without a JVM."""

from __future__ import annotations

import pytest

from spark_jobs.whatif.large_session import (
    DRIVER_HEAP_MB,
    OOM_EXIT,
    SparkConfError,
    parse_conf,
    session_conf,
)


def test_spark_conf_pairs_parse_and_a_bad_one_is_named():
    assert parse_conf(["spark.driver.memory=2g", "spark.x = a=b"]) == {
        "spark.driver.memory": "2g",
        "spark.x": "a=b",
    }
    with pytest.raises(SparkConfError, match=r"--spark-conf 'spark.driver.memory': expected KEY"):
        parse_conf(["spark.driver.memory"])
    with pytest.raises(SparkConfError, match=r"--spark-conf '=2g'"):
        parse_conf(["=2g"])


def test_one_driver_heap_for_every_size_the_users_settings_win_and_oom_exits():
    fixed = session_conf({})
    assert fixed["spark.driver.memory"] == f"{DRIVER_HEAP_MB}m" == "1024m"
    assert fixed["spark.driver.extraJavaOptions"] == OOM_EXIT
    mine = session_conf({"spark.driver.memory": "8g", "spark.driver.extraJavaOptions": "-Dx=1"})
    assert mine["spark.driver.memory"] == "8g"
    assert mine["spark.driver.extraJavaOptions"] == f"-Dx=1 {OOM_EXIT}"
