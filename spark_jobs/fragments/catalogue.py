"""The fragments fedload ships, by the names the registry records (``app/tasks/catalogue.py``).

A task names a catalogue fragment, its parameters and its inputs; any agent turns that record
into the PySpark function it runs (``build``) and the schema its SUnion reads (the output schema
of the input's fragment). The generator is a source: it runs in its owner's agent, not on Spark.

The functions are the ``fedload.fragments`` entry points of the ``fedload`` distribution
(pyproject.toml), the same way any distribution offers Python fragments
(``spark_jobs.fragments.python``): a catalogue name is an entry point's name.
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

from spark_jobs.fragments.network_monitoring import CONNECTION_SCHEMA
from spark_jobs.fragments.python import OWN_DISTRIBUTION, entry_points

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
    return functools.partial(function(fragment), **bound_parameters(fragment, params))


def function(fragment: str) -> Callable[..., DataFrame]:
    """The function fedload's entry point ``fragment`` names."""
    found = entry_points(OWN_DISTRIBUTION).get(fragment)
    if found is None or fragment not in PARAMETERS:
        raise UnknownFragment(f"{fragment!r} is not a Spark fragment of the catalogue")
    loaded: Callable[..., DataFrame] = found.load()
    return loaded


def bound_parameters(fragment: str, params: Mapping[str, Any]) -> dict[str, int]:
    """The fragment's parameters: the task's, else the registry's defaults."""
    return {k: int(params.get(k, default)) for k, default in PARAMETERS[fragment].items()}


def input_schema(input_fragment: str) -> StructType:
    try:
        return OUTPUT_SCHEMAS[input_fragment]
    except KeyError as error:
        raise UnknownFragment(f"{input_fragment!r} is not in the catalogue") from error
