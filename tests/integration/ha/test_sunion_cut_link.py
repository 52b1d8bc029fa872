"""A REAL cut link into a Spark DPC fragment's source: the SUnion source survives it.

The source is driven directly (no Spark, an injected clock) with input b behind a FaultProxy: a
batch planned before the cut reads after it (from the spool), latestOffset keeps answering while
b is unreachable and releases tentatively after the budget, the tentative range is computed from
what is reachable, and the spool is trimmed where the producers are. The whole tentative story
(Spark, agents, the consumer) runs through the product in
``tests/integration/participant/test_agent_tentative.py``.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa

from spark_jobs.fragments import CONNECTION_SCHEMA
from spark_jobs.ha.faultproxy import FaultProxy
from spark_jobs.runtime import StreamClient, StreamRef, publish
from spark_jobs.runtime.dpc import DPCSettings
from spark_jobs.runtime.sunion import Spool, SUnionReader
from tests.integration.ha.spark_dpc_support import FIRST, OTHER, X, ms, withheld_inputs
from tests.integration.runtime.conftest import BUCKET

CUT_FROM = 4


def _read(reader: SUnionReader, start: dict, end: dict) -> dict[str, int]:
    """Rows per input stream of the batch [start, end), as Spark's executors would read it."""
    counts: dict[str, int] = {}
    for partition in reader.partitions(start, end):
        batches = list(reader.read(partition))
        counts[partition.stream] = sum(b.num_rows for b in batches)
    return counts


def _rows_in(client: StreamClient, stream: str, lo: int, hi: int) -> int:
    return client.read_table(stream, lo, hi).num_rows


def test_source_reads_and_releases_through_a_cut_link(dpc_servers, tmp_path) -> None:
    clock, a, b = withheld_inputs(dpc_servers, CUT_FROM)
    settings = DPCSettings(X, clock=StreamRef(dpc_servers["home"].location, "clock"))
    budget = settings.delay_budget_ms
    cut_from = FIRST + CUT_FROM
    spool_dir = tmp_path / "spool"
    with FaultProxy(dpc_servers["b"].port) as proxy:
        inputs = [
            {"location": dpc_servers["a"].location, "stream": "a"},
            {"location": proxy.location, "stream": "b"},
        ]
        reader = SUnionReader(
            {
                "inputs": json.dumps(inputs),
                "consumer": "frag",
                "start_bucket": str(FIRST),
                "spool_dir": str(spool_dir),
                "call_timeout_ms": "500",
                **settings.source_options(BUCKET),
            },
            CONNECTION_SCHEMA,
        )
        spool = Spool(str(spool_dir))
        try:
            clock.advance("clock", ms(cut_from))
            start = reader.initialOffset()
            planned = reader.latestOffset(start, None)
            assert planned == {"bucket": cut_from}
            assert all(spool.has(proxy.location, "b", n) for n in range(FIRST, cut_from))

            # Cut after the batch was planned, before its rows are read: the read still works,
            # from the spool, with every row of both inputs.
            proxy.cut("drop")
            assert _read(reader, start, planned) == {
                "a": _rows_in(a, "a", FIRST, cut_from),
                "b": _rows_in(b, "b", FIRST, cut_from),
            }
            # b goes on producing behind the cut; the fragment cannot see it.
            publish(b, "b", OTHER.seconds(CUT_FROM, CUT_FROM + 2), BUCKET)
            assert _rows_in(b, "b", cut_from, cut_from + 1) > 0

            # Unreachable = no new boundary: nothing within the budget, tentative after it.
            clock.advance("clock", ms(cut_from + 1) + budget - 1)
            assert reader.latestOffset(planned, None) == planned
            # The first call after the cut waits for its deadline and makes b suspect; later
            # triggers do not call b at all until a probe hears from it.
            assert not reader.reachable(proxy.location)
            assert reader.reachable(dpc_servers["a"].location)
            clock.advance("clock", ms(cut_from + 1) + budget)
            tentative = reader.latestOffset(planned, None)
            assert tentative == {"bucket": cut_from + 1, "tentative_from": cut_from}
            # Computed from what is reachable: a's rows, none of b's.
            assert _read(reader, planned, tentative) == {
                "a": _rows_in(a, "a", cut_from, cut_from + 1),
                "b": 0,
            }

            # Acknowledgements stop at the first tentative bucket (the redo reads it again);
            # b's cannot get through, and the spool is trimmed to the same point.
            reader.commit(tentative)
            assert a.info("a")["acks"] == {"frag": cut_from}
            assert b.info("b")["acks"] == {}
            assert not any(spool.has(proxy.location, "b", n) for n in range(FIRST, cut_from))

            # Heal: b's buckets produced during the cut reach the spool.
            proxy.heal()
            # A probe notices the heal in the background; every trigger asks again meanwhile.
            for _ in range(100):
                reader.latestOffset(tentative, None)
                if spool.has(proxy.location, "b", cut_from + 1):
                    break
                time.sleep(0.1)
            assert reader.reachable(proxy.location)
            assert spool.has(proxy.location, "b", cut_from)
            assert spool.has(proxy.location, "b", cut_from + 1)
            table = pa.Table.from_batches(spool.get(proxy.location, "b", cut_from))
            assert table.num_rows == _rows_in(b, "b", cut_from, cut_from + 1)
        finally:
            reader.stop()
            for client in (clock, a, b):
                client.close()
