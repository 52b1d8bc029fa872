"""The Borealis network-monitoring query as three fragments, each a pure DataFrame function.

Every fragment takes streaming or static DataFrames with an event-time column ``stime`` and returns
one with ``stime`` set to the end of the window it reports on, so a fragment's output can feed the
next fragment (through SUnion) exactly like a raw input stream.
"""

from spark_jobs.fragments.network_monitoring import (
    CONNECTION_SCHEMA,
    connection_counts,
    distinct_port_counts,
    prefix_scanner_counts,
)

__all__ = [
    "CONNECTION_SCHEMA",
    "connection_counts",
    "distinct_port_counts",
    "prefix_scanner_counts",
]
