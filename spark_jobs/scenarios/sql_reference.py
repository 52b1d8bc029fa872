"""What a SQL fragment's output must be: its query run once as a Spark batch over the same input.

A live SQL fragment (moved, failed over) writes its windows to its owner's log and, with a
sink, to the owner's Parquet directory. Its reference is the same SQL run by Spark's batch
engine over every row its input had: the seeded generator's rows regenerated from the source's
options, or the rows an application wrote into a files source's directory. A window is final
in a streaming run once the watermark passes its end, so both sides are cut at a window end
that the live output has passed; anything lost or written twice before it is a difference.

Values are compared normalised: timestamps as UTC instants, floats to nine significant digits
(a mean summed across micro-batches is not summed in the batch engine's order).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.fragments.sql import STIME, FragmentInput, local_name, merged_schema, sql_fragment
from spark_jobs.runtime.participant_host import generator_of
from spark_jobs.runtime.sunion import INPUT_COLUMN
from spark_jobs.scenarios.reference import Comparison

Row = tuple[Any, ...]


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    if isinstance(value, pd.Timestamp):
        return _value(value.to_pydatetime())
    if isinstance(value, float):
        return value if value == 0 or not math.isfinite(value) else float(f"{value:.9g}")
    if isinstance(value, dict):
        return tuple((k, _value(v)) for k, v in sorted(value.items()))
    if isinstance(value, list | tuple):
        return tuple(_value(v) for v in value)
    return value


def window_end(row: Mapping[str, Any]) -> datetime | None:
    """When a row's window ended: its stime, or the end of its first window struct."""
    if row.get(STIME) is not None:
        return _value(row[STIME])
    for value in row.values():
        if isinstance(value, dict) and "end" in value:
            return _value(value["end"])
    return None


def keyed(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[tuple[Any, Row]]:
    """Each row as (window end, its values in ``columns`` order), normalised."""
    return [(window_end(r), tuple(_value(r.get(c)) for c in columns)) for r in rows]


def compare_rows(
    live: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]]
) -> Comparison:
    """Live rows against the reference's, on the reference's columns other than stime, up to
    the live output's second-newest window end (the newest may still be filling)."""
    if not live or not reference:
        return Comparison(False, None, len(live), len(reference), 0, 0, [], [])
    columns = [c for c in reference[0] if c != STIME]
    got_all = keyed(live, columns)
    ends = sorted({end for end, _ in got_all if end is not None})
    cutoff = ends[-2] if len(ends) > 1 else ends[-1]
    got = Counter(values for end, values in got_all if end is not None and end <= cutoff)
    expected = Counter(
        values for end, values in keyed(reference, columns) if end is not None and end <= cutoff
    )
    missing, unexpected = expected - got, got - expected
    return Comparison(
        matches=bool(expected) and not missing and not unexpected,
        cutoff=cutoff,
        rows=sum(got.values()),
        expected_rows=sum(expected.values()),
        missing=sum(missing.values()),
        unexpected=sum(unexpected.values()),
        missing_examples=[list(map(str, r)) for r in sorted(missing, key=str)[:5]],
        unexpected_examples=[list(map(str, r)) for r in sorted(unexpected, key=str)[:5]],
    )


def batch_output(
    spark: SparkSession, task: Mapping[str, Any], input_schema: str, event_time: str, rows: Any
) -> list[dict[str, Any]]:
    """``task``'s SQL as a Spark batch over ``rows`` (a pyarrow table or pandas frame of its one
    input, in ``input_schema``), as a list of rows."""
    inputs = [FragmentInput(local_name(task["inputs"][0]["task"]), input_schema, event_time)]
    merged = merged_schema(inputs)
    frame = rows.to_pandas() if isinstance(rows, pa.Table) else pd.DataFrame(rows)
    frame[INPUT_COLUMN] = 0
    for field in merged.fields:
        if field.name not in frame:
            frame[field.name] = None
    source: DataFrame = spark.createDataFrame(frame[[f.name for f in merged.fields]], merged)
    work = task.get("work") or {}
    build = sql_fragment(str(work["sql"]), inputs, work.get("watermark"))
    output = build(source.withColumn(INPUT_COLUMN, F.col(INPUT_COLUMN).cast("int")))
    return output.toArrow().to_pylist()


def generator_reference(
    spark: SparkSession, task: Mapping[str, Any], source: Mapping[str, Any], seconds: int
) -> list[dict[str, Any]]:
    """The SQL over the first ``seconds`` seconds of the generator source ``source`` (its
    task record: ``work.source`` holds the generator's options and schema)."""
    spec = dict((source.get("work") or {}).get("source") or {})
    table = generator_of(spec).seconds(0, seconds)
    return batch_output(spark, task, str(spec["schema"]), str(spec["event_time"]), table)


def seconds_to_cover(live: Sequence[Mapping[str, Any]], source: Mapping[str, Any]) -> int:
    """How many generator seconds the reference needs: up to the live output's newest window
    end, and half a minute more (the windows compared end before it)."""
    spec = dict((source.get("work") or {}).get("source") or {})
    epoch = generator_of(spec).epoch
    ends = [end for end in (window_end(r) for r in live) if end is not None]
    newest = max(ends) if ends else epoch
    return max(1, int((newest - epoch).total_seconds()) + 30)


def parquet_rows(directory: Path) -> list[dict[str, Any]]:
    """Every row of a Parquet sink's directory (whole files only: a reader never sees a part)."""
    if not directory.is_dir() or not any(directory.glob("*.parquet")):
        return []
    return pq.read_table(directory).to_pylist()
