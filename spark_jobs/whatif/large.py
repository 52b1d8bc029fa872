"""The very large federation on Spark: the round algorithm with its per-edge work on executors.

Same algorithm as ``app/market/rounds.py`` (read its docstring for the model), split by size:

- **Per contract** (both directions of every contract, k x n rows: the part that grows with the
  federation's size and density): never in the driver's JVM. The contracts go to the executors
  as one file (``SparkContext.addFile``: the driver's file server streams it from disk), and each
  executor's Python worker reads it once and sorts it by giver. A pass is one ``mapInPandas``
  over a table of partition numbers: each task takes its contiguous range of givers' edges and
  applies the NumPy reference's own functions to them (``rounds.edge_offers``,
  ``rounds.cheapest_live``; no per-row Python, no join, no shuffle, no window). A round is two
  passes: who has a candidate offer (one id per giver back), then each giver's cheapest live
  offer (one row per giver back). A chained-move search (``rounds.route_to_room``) runs one such
  pass per breadth-first level (``rounds.expand_level``), and only when someone above its
  threshold made no direct offer.
- **Per participant** (one number each: load, threshold, flags): kept as NumPy vectors on the
  driver and sent to the executors as a broadcast each pass (8 bytes per participant: 0.8 MB
  at 100,000), destroyed after it. Acceptances, the new loads and the round's figures are
  computed there by ``rounds.run_rounds`` itself, so both paths share every line of the
  bookkeeping.

Why the edges stay out of the driver's JVM: the previous version built a cached DataFrame from
the driver's arrays (``createDataFrame``, then a repartition by giver), so the driver's JVM held
the whole table as its input for the run and, in local mode, the executors' cache and the
shuffle beside it: its heap had to grow with the federation (heap used 185 MiB at 10,000
participants, 799 MiB at 100,000). Now the driver's JVM holds per pass one row per partition,
the broadcast and the results (a row per giver), so one fixed heap serves every size
(``large_session.DRIVER_HEAP_MB``; 140-250 MiB used from 10,000 to 1,000,000 participants,
``bench/whatif/README.md`` "The driver's memory, flat").

Why not DataFrame joins and windows (the earlier version): every round's plan had several
shuffles (joins of the edge table with the state, a window per giver, one per taker, an
aggregation back), each breadth-first level two more jobs plus checkpoints, and Spark's optimiser
re-planned all of it every round; at 10,000 participants a round took 4-27 s on a quiet machine
and 100-260 s on a loaded one, and 30,000 did not finish (``bench/whatif/README.md``). The
passes here have no shuffle at all, a round costs one scan of each worker's edges per pass, and
the results are those of the NumPy reference bit for bit (the same functions on the same
doubles, each giver's edges in the same order).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession

from app.market import rounds
from app.market.rounds import (
    BoolArray,
    FloatArray,
    IntArray,
    LargeFederation,
    OfferRows,
    RoundMoves,
    RoundRecord,
    RoundsResult,
)

GIVERS_SCHEMA = "giver long"
OFFERS_SCHEMA = "giver long, taker long, price double, offered long, room long"
LEVEL_SCHEMA = "v long, w long, low double, high double"

Edges = tuple[IntArray, IntArray, FloatArray, FloatArray]
# A pass's function of one partition's edges, given the partition's broadcast value.
EdgeWork = Callable[[Edges, Any], pd.DataFrame | None]


def write_contracts(fed: LargeFederation, directory: Path) -> Path:
    """The federation's contracts as one file for the executors (``SparkContext.addFile``): the
    driver's file server streams it from disk, so it never sits in the driver's heap. The name
    is unique, as Spark refuses to add a second file of one name."""
    path = directory / f"fedload-contracts-{uuid.uuid4().hex}.npz"
    np.savez(
        path,
        size=np.int64(fed.size),
        edge_a=fed.edge_a,
        edge_b=fed.edge_b,
        price_min=fed.price_min,
        price_max=fed.price_max,
    )
    return path


class _GiverSorted:
    """Every directed edge sorted by giver (stably, so a giver's edges keep the order
    ``LargeFederation.directed`` gives them), and where each giver's edges start."""

    def __init__(self, path: str) -> None:
        with np.load(path) as data:
            a, b = data["edge_a"].astype(np.int64), data["edge_b"].astype(np.int64)
            pmin, pmax = data["price_min"], data["price_max"]
            size = int(data["size"])
        giver, taker = np.concatenate([a, b]), np.concatenate([b, a])
        order = np.argsort(giver, kind="stable")
        self.size = size
        self.giver, self.taker = giver[order], taker[order]
        self.pmin = np.concatenate([pmin, pmin])[order]
        self.pmax = np.concatenate([pmax, pmax])[order]
        self.start = np.searchsorted(self.giver, np.arange(size + 1), side="left")

    def part(self, index: int, parts: int) -> Edges:
        """Partition ``index`` of ``parts``: the edges of givers in one contiguous id range."""
        lo = self.start[index * self.size // parts]
        hi = self.start[(index + 1) * self.size // parts]
        return self.giver[lo:hi], self.taker[lo:hi], self.pmin[lo:hi], self.pmax[lo:hi]


# Per Python worker (executor side): the contracts file it last read, sorted by giver. A worker
# serves many tasks of a run, so the file is read and sorted once per worker, not per pass; a
# new run's file (a new name) replaces it.
_LOADED: dict[str, _GiverSorted] = {}


def _worker_edges(name: str, index: int, parts: int) -> Edges:
    loaded = _LOADED.get(name)
    if loaded is None:
        from pyspark import SparkFiles

        _LOADED.clear()
        loaded = _LOADED[name] = _GiverSorted(SparkFiles.get(name))
    return loaded.part(index, parts)


def _over_parts(
    name: str, parts: int, shared: Any, work: EdgeWork
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """A ``mapInPandas`` function over the one-row-per-partition table: each task builds its
    partition's edges from the contracts file and applies ``work`` with the broadcast value."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        value = shared.value if shared is not None else None
        for batch in batches:
            for index in batch["part"].to_numpy(np.int64):
                edges = _worker_edges(name, int(index), parts)
                if edges[0].size:
                    out = work(edges, value)
                    if out is not None and len(out):
                        yield out

    return run


class _Participants:
    """What the passes read per participant, shipped in one broadcast: static capacity and scale,
    the round's loads, and, for the second pass, who gives this round."""

    def __init__(
        self,
        fed: LargeFederation,
        load: IntArray,
        is_giver: BoolArray | None = None,
    ) -> None:
        self.capacity, self.scale, self.delta = fed.capacity, fed.scale, fed.hysteresis
        self.load, self.is_giver = load, is_giver


def _givers(edges: Edges, p: _Participants) -> pd.DataFrame:
    offers = rounds.edge_offers(p.capacity, p.scale, p.load, p.delta, *edges)
    return pd.DataFrame({"giver": np.unique(edges[0][offers.candidate])})


def _offers(edges: Edges, p: _Participants) -> pd.DataFrame:
    assert p.is_giver is not None
    giver, taker, _, _ = edges
    offers = rounds.edge_offers(p.capacity, p.scale, p.load, p.delta, *edges)
    chosen = rounds.cheapest_live(giver, taker, offers, p.is_giver)
    g, t, price, offered, room, _ = rounds.direct_rows(giver, taker, offers, chosen)
    return pd.DataFrame({"giver": g, "taker": t, "price": price, "offered": offered, "room": room})


def _level(edges: Edges, labels: tuple[Any, ...]) -> pd.DataFrame:
    v, w, low, high = rounds.expand_level(*edges, *labels)
    return pd.DataFrame({"v": v, "w": w, "low": low, "high": high})


def _warm(edges: Edges, value: Any) -> None:
    return None


class SparkPlanner:
    """``rounds.plan_round`` with its per-edge work on the executors (see the module docstring)."""

    def __init__(
        self, spark: SparkSession, fed: LargeFederation, partitions: int, smooth: bool = True
    ) -> None:
        self.spark, self.fed, self.partitions, self.smooth = spark, fed, partitions, smooth
        self._files = tempfile.TemporaryDirectory(prefix="fedload-large-")
        contracts = write_contracts(fed, Path(self._files.name))
        spark.sparkContext.addFile(str(contracts))
        self.contracts = contracts.name
        # One row per partition: what a pass maps over (the edges themselves never enter the JVM).
        self.parts = spark.range(0, partitions, 1, partitions).withColumnRenamed("id", "part")
        # The workers read the contracts before the first round, so round 1 is not charged.
        self._run(_warm, None, GIVERS_SCHEMA)
        # Constant over a run: computed once on the driver.
        self.threshold = rounds.thresholds(fed)
        self.p_room = rounds.room_price(fed)

    def _run(self, work: EdgeWork, value: Any, schema: str) -> pd.DataFrame:
        shared = self.spark.sparkContext.broadcast(value) if value is not None else None
        try:
            function = _over_parts(self.contracts, self.partitions, shared, work)
            return pd.DataFrame(self.parts.mapInPandas(function, schema).toPandas())
        finally:
            if shared is not None:
                shared.destroy()

    def __call__(self, load: IntArray, relays: bool) -> RoundMoves:
        fed = self.fed
        givers = self._run(_givers, _Participants(fed, load), GIVERS_SCHEMA)
        is_giver = np.zeros(fed.size, dtype=bool)
        is_giver[givers["giver"].to_numpy(np.int64)] = True
        direct = self._run(_offers, _Participants(fed, load, is_giver), OFFERS_SCHEMA)
        direct = direct.sort_values("giver", kind="stable")
        direct_givers = direct["giver"].to_numpy(np.int64)
        rows: list[OfferRows] = [
            (
                direct_givers,
                direct["taker"].to_numpy(np.int64),
                direct["price"].to_numpy(np.float64),
                direct["offered"].to_numpy(np.int64),
                direct["room"].to_numpy(np.int64),
                np.ones(len(direct), np.int64),
            )
        ]
        if relays:
            rows.append(
                rounds.relay_offers(
                    fed,
                    load,
                    is_giver,
                    direct_givers,
                    self.threshold,
                    self.p_room,
                    step=self._step,
                )
            )
        if relays and self.smooth:
            rows.append(
                rounds.smoothing_offers(
                    fed, load, is_giver, direct_givers, self.threshold, rows, step=self._step
                )
            )
        return rounds.accept_offers(rows)

    def _step(
        self,
        frontier: BoolArray,
        labelled: BoolArray,
        end: IntArray,
        low: FloatArray,
        high: FloatArray,
    ) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
        picked = self._run(_level, (frontier, labelled, end, low, high), LEVEL_SCHEMA)
        picked = picked.sort_values("v", kind="stable")
        return (
            picked["v"].to_numpy(np.int64),
            picked["w"].to_numpy(np.int64),
            picked["low"].to_numpy(np.float64),
            picked["high"].to_numpy(np.float64),
        )

    def close(self) -> None:
        self._files.cleanup()


def default_partitions(spark: SparkSession) -> int:
    """Two partitions of the givers per core Spark has: small enough tasks to balance."""
    return max(2, 2 * spark.sparkContext.defaultParallelism)


def run_rounds(
    spark: SparkSession,
    fed: LargeFederation,
    *,
    max_rounds: int = 200,
    record_loads: bool = False,
    on_round: Callable[[RoundRecord, float], None] | None = None,
    relays: bool = True,
    smooth: bool = True,
    partitions: int | None = None,
) -> RoundsResult:
    """Rounds until no offer is made or ``max_rounds``; ``on_round`` sees each round's record.

    The same result as ``rounds.run_rounds(fed)``, with each round's planning on Spark.
    """
    planner = SparkPlanner(spark, fed, partitions or default_partitions(spark), smooth)
    try:
        return rounds.run_rounds(
            fed,
            max_rounds=max_rounds,
            record_loads=record_loads,
            relays=relays,
            smooth=smooth,
            plan=planner,
            on_round=on_round,
        )
    finally:
        planner.close()
