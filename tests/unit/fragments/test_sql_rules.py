"""SQL fragments' pure rules: table references rewritten to per-fragment views, where the
output's stime comes from, and stream schemas read without a JVM."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    DoubleType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.fragments.sql import (
    NO_EVENT_TIME,
    FragmentAnalysisError,
    FragmentInput,
    local_name,
    log_schema,
    merged_schema,
    parse_schema,
    rewrite_tables,
    stime_rule,
)
from spark_jobs.runtime.sunion import INPUT_COLUMN

VIEWS = {"readings": "fedload_1_readings", "alarms": "fedload_1_alarms"}
WINDOW = "struct<start:timestamp,end:timestamp>"


def test_a_table_reads_its_view_and_keeps_its_name_as_alias():
    out = rewrite_tables("SELECT readings.temp FROM readings WHERE temp > 3", VIEWS)
    assert out == ("SELECT readings.temp FROM `fedload_1_readings` AS readings WHERE temp > 3")


def test_an_alias_stays_and_owner_qualified_names_and_case_resolve():
    out = rewrite_tables("SELECT r.x FROM A.Readings r JOIN alarms ON r.id = alarms.id", VIEWS)
    assert "`fedload_1_readings` AS r" in out
    assert "`fedload_1_alarms` AS alarms" in out
    assert "A.Readings" not in out


def test_subqueries_are_rewritten_and_a_cte_shadows_an_input_of_its_name():
    sql = (
        "WITH alarms AS (SELECT * FROM readings WHERE temp > 9) "
        "SELECT * FROM alarms JOIN (SELECT * FROM readings) s ON 1 = 1"
    )
    out = rewrite_tables(sql, VIEWS)
    assert out.count("`fedload_1_readings`") == 2
    assert "fedload_1_alarms" not in out


def test_other_tables_are_left_alone():
    assert "FROM other" in rewrite_tables("SELECT * FROM other", VIEWS)


@pytest.mark.parametrize("sql", ["SELECT FROM WHERE", "DROP TABLE readings", "SELECT 1; SELECT 2"])
def test_anything_but_one_query_is_an_analysis_error(sql):
    with pytest.raises(FragmentAnalysisError):
        rewrite_tables(sql, VIEWS)


def test_local_name_is_the_last_part_of_the_task_name():
    assert local_name("A.readings") == "readings"
    assert local_name("readings") == "readings"


def test_stime_rules_in_order():
    assert stime_rule([("stime", "timestamp"), ("w", WINDOW)], ["ts"]) == ("keep", "stime")
    assert stime_rule([("station", "string"), ("w", WINDOW)], ["ts"]) == ("window", "w")
    assert stime_rule([("station", "string"), ("TS", "timestamp")], ["ts"]) == ("copy", "TS")
    # A second input's event-time column counts too.
    assert stime_rule([("at", "timestamp")], ["ts", "at"]) == ("copy", "at")


def test_an_output_without_event_time_is_refused_with_the_rule():
    with pytest.raises(FragmentAnalysisError, match="the output has no event time"):
        stime_rule([("station", "string"), ("n", "bigint")], ["ts"])
    # A column named like the event time but not a timestamp is no event time.
    with pytest.raises(FragmentAnalysisError) as raised:
        stime_rule([("ts", "string")], ["ts"])
    assert str(raised.value) == NO_EVENT_TIME


def test_parse_schema_maps_nested_types_without_spark():
    schema = parse_schema(
        "station STRING, `odd name` INT, w STRUCT<start: TIMESTAMP, end: TIMESTAMP>, "
        "m MAP<STRING, ARRAY<DECIMAL(5,2)>>"
    )
    assert schema == StructType(
        [
            StructField("station", StringType()),
            StructField("odd name", IntegerType()),
            StructField(
                "w",
                StructType(
                    [StructField("start", TimestampType()), StructField("end", TimestampType())]
                ),
            ),
            StructField("m", MapType(StringType(), ArrayType(DecimalType(5, 2)))),
        ]
    )


def test_a_source_log_gets_stime_and_a_fragment_log_keeps_its_own():
    source = FragmentInput("readings", "station STRING, ts TIMESTAMP, temp DOUBLE", "ts")
    assert log_schema(source).names == ["station", "ts", "temp", "stime"]
    assert not source.keeps_stime
    fragment = FragmentInput("hot", "stime TIMESTAMP, station STRING")
    assert log_schema(fragment).names == ["stime", "station"]
    assert fragment.keeps_stime


def test_merged_schema_is_every_column_by_name_then_the_input_tag():
    a = FragmentInput("a", "station STRING, ts TIMESTAMP, temp DOUBLE", "ts")
    b = FragmentInput("b", "station STRING, ts TIMESTAMP, level INT", "ts")
    merged = merged_schema([a, b])
    assert merged.names == ["station", "ts", "temp", "stime", "level", INPUT_COLUMN]
    assert merged["temp"].dataType == DoubleType()


def test_merged_schema_refuses_one_column_with_two_types():
    a = FragmentInput("a", "v DOUBLE, ts TIMESTAMP", "ts")
    b = FragmentInput("b", "v STRING, ts TIMESTAMP", "ts")
    with pytest.raises(FragmentAnalysisError, match="column v is double in one input"):
        merged_schema([a, b])


def test_spark_window_calls_survive_the_rewrite():
    sql = (
        "SELECT window(ts, '4 seconds') AS window, count(*) AS n FROM readings "
        "GROUP BY window(ts, '4 seconds')"
    )
    out = rewrite_tables(sql, VIEWS)
    assert out.count("window(ts, '4 seconds')") == 2
    assert "FROM `fedload_1_readings` AS readings" in out
