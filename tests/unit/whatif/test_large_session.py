"""The what-if Spark session's settings (spark_jobs/whatif/large_session.py), without a JVM."""

from __future__ import annotations

import pytest

from spark_jobs.whatif.large_session import (
    OOM_EXIT,
    SparkConfError,
    driver_heap_mb,
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


def test_driver_heap_grows_slowly_with_the_edge_table_and_is_capped():
    assert driver_heap_mb(10_000, 50_000) == 1039
    assert driver_heap_mb(100_000, 500_000) == 1165
    assert driver_heap_mb(10_000_000, 50_000_000) == 4096


def test_the_users_settings_win_and_the_jvm_always_exits_on_out_of_memory():
    sized = session_conf({}, participants=100_000, contracts=500_000)
    assert sized["spark.driver.memory"] == "1165m"
    assert sized["spark.driver.extraJavaOptions"] == OOM_EXIT
    mine = session_conf(
        {"spark.driver.memory": "8g", "spark.driver.extraJavaOptions": "-Dx=1"},
        participants=100_000,
        contracts=500_000,
    )
    assert mine["spark.driver.memory"] == "8g"
    assert mine["spark.driver.extraJavaOptions"] == f"-Dx=1 {OOM_EXIT}"
