"""The fragments fedload ships, by the names the registry records (``app/tasks/catalogue.py``).

A task names a catalogue fragment, its parameters and its inputs; any agent turns that record
into the PySpark function it runs (``build``) and the schema its SUnion reads (the output schema
of the input's fragment). The generator is a source: it runs in its owner's agent, not on Spark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.fragments.network_monitoring import (
    CONNECTION_SCHEMA,
    connection_counts,
    distinct_port_counts,
    prefix_scanner_counts,
)

GENERATOR = "generator"


def _windows(*columns: tuple[str, Any]) -> StructType:
    return StructType(
        [
            StructField("stime", TimestampType(), nullable=True),
            StructField("window_start", TimestampType(), nullable=True),
            *(StructField(name, kind, nullable=True) for name, kind in columns),
        ]
    )


# What each fragment writes: the schema a consumer of its output stream reads.
OUTPUT_SCHEMAS: dict[str, StructType] = {
    GENERATOR: CONNECTION_SCHEMA,
    "connections_per_source": _windows(("src_ip", StringType()), ("connections", LongType())),
    "distinct_ports_per_source": _windows(("src_ip", StringType()), ("ports", IntegerType())),
    "prefix_scanners": _windows(
        ("prefix", StringType()), ("scanners", LongType()), ("ports", LongType())
    ),
}

_FUNCTIONS: dict[str, Callable[..., DataFrame]] = {
    "connections_per_source": connection_counts,
    "distinct_ports_per_source": distinct_port_counts,
    "prefix_scanners": prefix_scanner_counts,
}

# Parameters each function takes, with the registry's defaults (kept equal to the catalogue's
# description in app/tasks/catalogue.py; tests/unit/fragments pins that they agree).
PARAMETERS: dict[str, dict[str, Any]] = {
    "connections_per_source": {"window_seconds": 10, "threshold": 25},
    "distinct_ports_per_source": {"window_seconds": 10, "threshold": 10},
    "prefix_scanners": {"window_seconds": 10, "min_scanners": 1},
}


class UnknownFragment(ValueError):
    pass


def build(fragment: str, params: Mapping[str, Any]) -> Callable[[DataFrame], DataFrame]:
    """The DataFrame function of a catalogue fragment with its parameters bound."""
    if fragment not in _FUNCTIONS:
        raise UnknownFragment(f"{fragment!r} is not a Spark fragment of the catalogue")
    known = PARAMETERS[fragment]
    bound = {k: int(params.get(k, default)) for k, default in known.items()}
    return functools.partial(_FUNCTIONS[fragment], **bound)


def input_schema(input_fragment: str) -> StructType:
    try:
        return OUTPUT_SCHEMAS[input_fragment]
    except KeyError as error:
        raise UnknownFragment(f"{input_fragment!r} is not in the catalogue") from error
