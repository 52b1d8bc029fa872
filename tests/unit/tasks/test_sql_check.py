"""SQL fragments checked against their inputs' schemas with sqlglot (app.work.sql_check)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.work.errors import FragmentError
from app.work.spec import StreamSchema, parse_ddl
from app.work.sql_check import check_sql


def schema(ddl: str) -> StreamSchema:
    return parse_ddl(ddl, ()).with_stime()


READINGS = schema("station STRING, ts TIMESTAMP, temp DOUBLE")
SITES = schema("station STRING, region STRING")
INPUTS: dict[str, StreamSchema | None] = {"readings": READINGS, "sites": SITES}


def output(sql: str, inputs: dict[str, StreamSchema | None] = INPUTS) -> str | None:
    found = check_sql(sql, inputs).output
    return None if found is None else found.ddl()


def refused(sql: str, inputs: dict[str, StreamSchema | None] = INPUTS) -> str:
    with pytest.raises(FragmentError) as caught:
        check_sql(sql, inputs)
    assert caught.value.field == "sql"
    return caught.value.detail


def test_the_daily_mean_infers_its_window_struct_and_types() -> None:
    sql = (
        "SELECT window(ts, '1 day') AS day, station, avg(temp) AS mean_temp FROM readings "
        "GROUP BY window(ts, '1 day'), station"
    )
    assert check_sql(sql, INPUTS).tables == ("readings",)
    assert output(sql) == (
        "day struct<start:timestamp,end:timestamp>, station string, mean_temp double"
    )


def test_an_unknown_column_is_named_with_the_columns_the_input_has() -> None:
    assert refused("SELECT station, tmp FROM readings") == (
        "unknown column 'tmp' in readings (it has station, ts, temp)"
    )
    # Through an alias, and in WHERE: the input it stands for is named.
    assert refused("SELECT r.station FROM readings r WHERE r.tmp > 1") == (
        "unknown column 'tmp' in readings (it has station, ts, temp)"
    )


def test_an_unknown_column_over_a_join_names_every_input_in_scope() -> None:
    detail = refused("SELECT zone FROM readings JOIN sites USING (station)")
    assert detail == (
        "unknown column 'zone' in readings or sites "
        "(readings has station, ts, temp; sites has station, region)"
    )


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM readings", "station string, ts timestamp, temp double, stime timestamp"),
        # Aliases referenced by GROUP BY and ORDER BY are the SELECT's own.
        (
            "SELECT station AS s, count(*) AS n FROM readings GROUP BY s ORDER BY n",
            "s string, n bigint",
        ),
        # window.start / window.end of a window(...) grouping, as Spark names it.
        (
            "SELECT window.end AS ends, station, max(temp) AS top FROM readings "
            "GROUP BY window(ts, '1 hour'), station",
            "ends timestamp, station string, top double",
        ),
        (
            "SELECT window(ts, '10 minutes'), count(*) AS n FROM readings "
            "GROUP BY window(ts, '10 minutes')",
            "window struct<start:timestamp,end:timestamp>, n bigint",
        ),
        (
            "SELECT d.end AS ends FROM (SELECT window(ts, '1 hour') AS d FROM readings)",
            "ends timestamp",
        ),
        (
            "WITH hot AS (SELECT station, temp FROM readings WHERE temp > 30) "
            "SELECT station, CAST(temp AS INT) AS t FROM hot",
            "station string, t int",
        ),
        (
            "SELECT r.station, s.region FROM readings r JOIN sites s ON r.station = s.station",
            "station string, region string",
        ),
    ],
)
def test_output_columns_are_inferred_where_sqlglot_knows_them(sql: str, expected: str) -> None:
    assert output(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        # Spark names an unaliased expression by its text, sqlglot does not: the agent says.
        "SELECT station, count(*) FROM readings GROUP BY station",
        # A function whose type sqlglot does not know.
        "SELECT date_trunc('hour', ts) AS hour FROM readings",
    ],
)
def test_an_output_sqlglot_cannot_type_is_left_to_spark(sql: str) -> None:
    assert output(sql) is None


def test_an_input_of_unknown_schema_is_not_column_checked() -> None:
    assert output("SELECT anything FROM later", {"later": None}) is None


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELEC station FROM readings", "does not parse as Spark SQL"),
        ("SELECT station FROM readings WHERE (", "does not parse as Spark SQL"),
        ("INSERT INTO readings SELECT * FROM readings", "a SELECT query, not INSERT"),
        ("DROP TABLE readings", "a SELECT query, not DROP"),
        ("SELECT 1 AS a; SELECT 2 AS b", "one SELECT statement, got 2"),
        ("SELECT * FROM weather", "unknown table 'weather': a fragment reads only its inputs"),
        ("SELECT * FROM A.readings", "write 'readings', not 'A.readings'"),
        ("SELECT 1 AS one", "reads none of the task's inputs"),
        ("SELECT nope.station FROM readings", "unknown table or alias 'nope'"),
        (
            "SELECT window.middle FROM readings GROUP BY window(ts, '1 hour')",
            "unknown column 'window.middle': a window has start and end",
        ),
        ("SELECT window.end FROM readings", "unknown column 'window' in readings"),
    ],
)
def test_bad_queries_are_refused_naming_what_is_wrong(sql: str, words: str) -> None:
    assert words in refused(sql)


def test_a_deeply_nested_query_is_refused_not_crashed_on() -> None:
    sql = "SELECT " + "(" * 3000 + "temp" + ")" * 3000 + " AS t FROM readings"
    assert refused(sql) == "the query nests too deeply to check"


_WORDS = "SELECT FROM readings sites WHERE GROUP BY ORDER window ( ) , . * '1 day' ` station ts"
WORDS = st.sampled_from([*_WORDS.split(), "temp", "1", "AS", ";", "JOIN", "USING", "avg(temp)"])


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=16).map(" ".join))
def test_any_text_is_either_checked_or_refused_at_sql(sql: str) -> None:
    try:
        found = check_sql(sql, INPUTS)
    except FragmentError as exc:
        assert exc.field == "sql" and exc.detail
    else:
        assert set(found.tables) <= {"readings", "sites"}
