"""One place that builds SparkSessions, so tests, the demo and the what-if job agree on settings."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from app.java import require_java


def build_session(
    *,
    app_name: str = "fedload",
    master: str | None = None,
    shuffle_partitions: int = 4,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    # Say in one line that Java is missing (and how to install it) instead of PySpark's
    # launcher failing with JAVA_GATEWAY_EXITED after the shell script's own messages.
    require_java()
    # Executors must run the same interpreter as the driver, or pickled closures break.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    master = master or os.environ.get("SPARK_MASTER", "local[*]")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
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
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
