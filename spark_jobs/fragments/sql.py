"""A participant's Spark SQL fragment as the DataFrame function a ``FragmentSpec`` runs.

The task's SQL names each input by its local name (task ``A.readings`` is ``readings``). The
fragment's source is one SUnion DataFrame over every input; SUnion tags each row with the index
of the input it came from (``sunion.INPUT_COLUMN``, filled like its ``kind`` column), so each
input gets a view of its own rows and its own columns, matched by name (inputs need not share a
schema). Views are registered under names unique to one build and dropped as soon as Spark has
analysed the query (the analysed plan holds the views' plans), and the SQL's table references
are rewritten to those names with sqlglot: several fragments share an agent's SparkSession, and
two tasks reading streams both called ``readings`` must not see each other's.

``stime`` is the federation's column, not the user's: a source's view leaves it out when it
repeats the declared event-time column, and the output gets it back from what the query selects
(``stime_rule``). A fragment's output keeps its ``window`` struct as it is: the output log is
Arrow, which carries structs, and a consumer reads it back as a struct.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import sqlglot
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from sqlglot import exp

from app.work.errors import FragmentError
from app.work.spec import parse_ddl, split_top
from app.work.sql_check import WINDOW_FUNCTION, rewrite_window
from spark_jobs.runtime.sunion import INPUT_COLUMN

STIME = "stime"
_WINDOW_CALL = re.compile(rf"\b{WINDOW_FUNCTION}\s*\(", re.IGNORECASE)
NO_EVENT_TIME = "the output has no event time: select a window(...) or the event-time column"


class FragmentAnalysisError(ValueError):
    """A fragment that cannot run over its inputs, with the reason its owner is told."""


class FragmentInput(NamedTuple):
    """One input as the fragment's code sees it."""

    name: str  # the local name: the view the SQL reads, the keyword a Python function gets
    schema: str  # Spark DDL of the stream's columns (with or without stime)
    event_time: str = STIME  # a source's declared event-time column; stime for a fragment's

    @property
    def keeps_stime(self) -> bool:
        """A fragment's output (or a source whose event time is stime itself) shows stime, its
        event time; a source's view hides it, since it only repeats ``event_time``."""
        return self.event_time.lower() == STIME


def local_name(task: str) -> str:
    """``A.readings`` -> ``readings``: how a task's SQL names the output of another task."""
    return task.rsplit(".", 1)[-1]


def parse_schema(ddl: str) -> StructType:
    """A stream's DDL as Spark's StructType, without a JVM (``StructType.fromDDL`` needs one,
    and an agent builds a fragment's spec before its Spark has started). The registry's parser
    (``app.work.spec.parse_ddl``) checks and normalises the DDL; this maps its types."""
    try:
        columns = parse_ddl(ddl, ()).columns
    except FragmentError as error:
        raise FragmentAnalysisError(f"schema {ddl!r}: {error}") from error
    return StructType([StructField(c.name, spark_type(c.type), True) for c in columns])


_SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "boolean": BooleanType(),
    "tinyint": ByteType(),
    "smallint": ShortType(),
    "int": IntegerType(),
    "bigint": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
    "binary": BinaryType(),
}


def spark_type(kind: str) -> DataType:
    """One normalised type of ``parse_ddl`` (``int``, ``decimal(10,2)``, ``array<...>``,
    ``map<k,v>``, ``struct<name:type,...>``) as a Spark DataType."""
    if kind in _SPARK_TYPES:
        return _SPARK_TYPES[kind]
    decimal = re.fullmatch(r"decimal\((\d+),(\d+)\)", kind)
    if decimal:
        return DecimalType(int(decimal.group(1)), int(decimal.group(2)))
    outer, _, inner = kind.partition("<")
    inner = inner[:-1]
    if outer == "array":
        return ArrayType(spark_type(inner), True)
    if outer == "map":
        key, value = split_top(inner)
        return MapType(spark_type(key), spark_type(value), True)
    if outer == "struct":
        fields = []
        for part in split_top(inner):
            if part.startswith("`"):
                end = part.index("`", 1)
                name, rest = part[1:end].replace("``", "`"), part[end + 2 :]
            else:
                name, _, rest = part.partition(":")
            fields.append(StructField(name, spark_type(rest), True))
        return StructType(fields)
    raise FragmentAnalysisError(f"unknown column type {kind!r}")


def log_schema(fragment_input: FragmentInput) -> StructType:
    """The columns of the input's log: its declared ones and stime, which every log carries."""
    schema = parse_schema(fragment_input.schema)
    if STIME not in [f.name.lower() for f in schema.fields]:
        schema = StructType([*schema.fields, StructField(STIME, TimestampType(), True)])
    return schema


def merged_schema(inputs: Sequence[FragmentInput]) -> StructType:
    """What SUnion reads for these inputs: every column of any input by name (an input's rows
    hold nulls in another's columns), then the input tag."""
    fields: dict[str, StructField] = {}
    for item in inputs:
        for f in log_schema(item).fields:
            seen = fields.get(f.name.lower())
            if seen is not None and seen.dataType != f.dataType:
                raise FragmentAnalysisError(
                    f"column {f.name} is {seen.dataType.simpleString()} in one input and "
                    f"{f.dataType.simpleString()} in {item.name}"
                )
            fields.setdefault(f.name.lower(), StructField(f.name, f.dataType, True))
    return StructType([*fields.values(), StructField(INPUT_COLUMN, IntegerType(), True)])


def input_frames(
    merged: DataFrame, inputs: Sequence[FragmentInput], watermark: str | None
) -> list[DataFrame]:
    """One DataFrame per input: its rows, its columns, its watermark on its event time."""
    frames = []
    for index, item in enumerate(inputs):
        columns = [
            f.name for f in log_schema(item).fields if item.keeps_stime or f.name.lower() != STIME
        ]
        frame = merged.where(F.col(INPUT_COLUMN) == index).select(*columns)
        if watermark:
            frame = frame.withWatermark(item.event_time, watermark)
        frames.append(frame)
    return frames


def rewrite_tables(sql: str, names: Mapping[str, str]) -> str:
    """The query with each table named in ``names`` (a local name, matched case-insensitively,
    also written ``OWNER.name``) read from the view named for it. A table keeps its old name as
    its alias, so ``readings.temp`` still resolves; a CTE of the same name shadows the input.
    Raises FragmentAnalysisError unless ``sql`` is one query."""
    try:
        # sqlglot reads ``window`` as a WINDOW clause in GROUP BY; the registry's token-level
        # rewrite makes the calls ``fedload_window(...)``, turned back after generating.
        statements = sqlglot.parse(rewrite_window(sql), dialect="spark")
    except (sqlglot.errors.SqlglotError, FragmentError) as error:
        raise FragmentAnalysisError(f"the SQL does not parse: {error}") from error
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise FragmentAnalysisError("a SQL fragment is one query (SELECT ...)")
    tree = statements[0]
    lowered = {k.lower(): v for k, v in names.items()}
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if name not in lowered or (name in ctes and not table.db) or table.catalog:
            continue
        alias = table.alias or table.name
        replacement = exp.Table(this=exp.to_identifier(lowered[name], quoted=True))
        table.replace(exp.alias_(replacement, exp.to_identifier(alias), table=True))
    return _WINDOW_CALL.sub("window(", tree.sql(dialect="spark"))


def _is_window(kind: str) -> bool:
    return kind.replace(" ", "").startswith("struct<start:timestamp") and ",end:timestamp" in kind


def stime_rule(columns: Sequence[tuple[str, str]], event_times: Sequence[str]) -> tuple[str, str]:
    """Where the output's stime comes from, given its ``(name, simpleString type)`` columns:

    - ``("keep", "stime")``: the query selected a stime column itself;
    - ``("window", name)``: the end of its (first) window struct, when its row is reported;
    - ``("copy", name)``: an input's event-time column that the query passes through.

    Raises FragmentAnalysisError when none applies."""
    by_name = {name.lower(): (name, kind) for name, kind in columns}
    if STIME in by_name:
        return ("keep", by_name[STIME][0])
    window = next((name for name, kind in columns if _is_window(kind)), None)
    if window is not None:
        return ("window", window)
    for event_time in event_times:
        found = by_name.get(event_time.lower())
        if found is not None and found[1].startswith("timestamp"):
            return ("copy", found[0])
    raise FragmentAnalysisError(NO_EVENT_TIME)


def with_stime(output: DataFrame, event_times: Sequence[str]) -> DataFrame:
    """The user's output with the stime column its log needs (last, unless it has one)."""
    columns = [(f.name, f.dataType.simpleString()) for f in output.schema.fields]
    rule, column = stime_rule(columns, event_times)
    if rule == "keep":
        return output
    source = F.col(f"`{column}`.end") if rule == "window" else F.col(f"`{column}`")
    return output.withColumn(STIME, source.cast(TimestampType()))


def sql_fragment(
    sql: str, inputs: Sequence[FragmentInput | tuple[str, str, str]], watermark: str | None
) -> Callable[[DataFrame], DataFrame]:
    """The function of SUnion's DataFrame (``merged_schema(inputs)``) that runs ``sql``."""
    items = [FragmentInput(*i) for i in inputs]
    if len({i.name.lower() for i in items}) != len(items):
        raise FragmentAnalysisError("two inputs have the same name: the SQL cannot tell them apart")

    def build(merged: DataFrame) -> DataFrame:
        spark = merged.sparkSession
        scope = uuid.uuid4().hex[:12]
        views = {i.name: f"fedload_{scope}_{i.name}" for i in items}
        query = rewrite_tables(sql, views)
        frames = input_frames(merged, items, watermark)
        try:
            for item, frame in zip(items, frames, strict=True):
                frame.createOrReplaceTempView(views[item.name])
            output = spark.sql(query)
        finally:
            for view in views.values():
                spark.catalog.dropTempView(view)
        return with_stime(output, [i.event_time for i in items])

    return build
