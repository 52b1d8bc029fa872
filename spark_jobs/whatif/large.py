"""The very large federation on Spark: the round algorithm with its per-edge work on executors.

Same algorithm as ``app/market/rounds.py`` (read its docstring for the model), split by size:

- **Per contract** (both directions of every contract, k x n rows: the part that grows with the
  federation's size and density): the contract edge table lives on the executors, partitioned by
  giver once and cached. Each round runs two ``mapInPandas`` passes over it that apply the NumPy
  reference's own functions to a whole partition at a time (``rounds.edge_offers``,
  ``rounds.cheapest_live``; no per-row Python, no join, no shuffle, no window): who has a
  candidate offer (one id per giver back), then each giver's cheapest live offer (one row per
  giver back). A chained-move search (``rounds.route_to_room``) runs one such pass per
  breadth-first level (``rounds.expand_level``), and only when someone above its threshold
  made no direct offer.
- **Per participant** (one number each: load, threshold, flags): kept as NumPy vectors on the
  driver and sent to the executors as a broadcast each pass (8 bytes per participant: 0.8 MB
  at 100,000). Acceptances, the new loads and the round's figures are computed there by
  ``rounds.run_rounds`` itself, so both paths share every line of the bookkeeping.

Why not DataFrame joins and windows (the earlier version): every round's plan had several
shuffles (joins of the edge table with the state, a window per giver, one per taker, an
aggregation back), each breadth-first level two more jobs plus checkpoints, and Spark's optimiser
re-planned all of it every round; at 10,000 participants a round took 4-27 s on a quiet machine
and 100-260 s on a loaded one, and 30,000 did not finish (``bench/whatif/README.md``). The
passes here have no shuffle at all (the one repartition by giver happens once), so a round costs
one scan of the cached edge table per pass, and the results are those of the NumPy reference bit
for bit (the same functions on the same doubles).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession

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

EDGE_SCHEMA = "giver long, taker long, price_min double, price_max double"
GIVERS_SCHEMA = "giver long"
OFFERS_SCHEMA = "giver long, taker long, price double, offered long, room long"
LEVEL_SCHEMA = "v long, w long, low double, high double"

Edges = tuple[IntArray, IntArray, FloatArray, FloatArray]


def edge_table(spark: SparkSession, fed: LargeFederation, partitions: int) -> DataFrame:
    """Both directions of every contract, partitioned by giver (each giver's contracts in one
    partition, which the per-giver picks rely on) and cached on the executors."""
    giver, taker, pmin, pmax = fed.directed()
    frame = pd.DataFrame({"giver": giver, "taker": taker, "price_min": pmin, "price_max": pmax})
    return spark.createDataFrame(frame, EDGE_SCHEMA).repartition(partitions, "giver").cache()


def _partition_edges(batches: Iterator[pd.DataFrame]) -> Edges | None:
    """A whole partition of the edge table as arrays (Arrow hands it over in batches, and a
    giver's edges may straddle two of them)."""
    frames = [frame for frame in batches if len(frame)]
    if not frames:
        return None
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    return (
        frame["giver"].to_numpy(np.int64),
        frame["taker"].to_numpy(np.int64),
        frame["price_min"].to_numpy(np.float64),
        frame["price_max"].to_numpy(np.float64),
    )


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


def _givers_pass(shared: Any) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        edges = _partition_edges(batches)
        if edges is None:
            return
        p: _Participants = shared.value
        offers = rounds.edge_offers(p.capacity, p.scale, p.load, p.delta, *edges)
        yield pd.DataFrame({"giver": np.unique(edges[0][offers.candidate])})

    return run


def _offers_pass(shared: Any) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        edges = _partition_edges(batches)
        if edges is None:
            return
        p: _Participants = shared.value
        assert p.is_giver is not None
        giver, taker, _, _ = edges
        offers = rounds.edge_offers(p.capacity, p.scale, p.load, p.delta, *edges)
        chosen = rounds.cheapest_live(giver, taker, offers, p.is_giver)
        g, t, price, offered, room, _ = rounds.direct_rows(giver, taker, offers, chosen)
        yield pd.DataFrame(
            {"giver": g, "taker": t, "price": price, "offered": offered, "room": room}
        )

    return run


def _level_pass(shared: Any) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        edges = _partition_edges(batches)
        if edges is None:
            return
        v, w, low, high = rounds.expand_level(*edges, *shared.value)
        yield pd.DataFrame({"v": v, "w": w, "low": low, "high": high})

    return run


class SparkPlanner:
    """``rounds.plan_round`` with its per-edge work on the executors (see the module docstring)."""

    def __init__(
        self, spark: SparkSession, fed: LargeFederation, partitions: int, smooth: bool = True
    ) -> None:
        self.spark, self.fed, self.smooth = spark, fed, smooth
        self.edges = edge_table(spark, fed, partitions)
        self.edges.count()  # cached before the first round, so round 1 is not charged for it
        # Constant over a run: computed once on the driver.
        self.threshold = rounds.thresholds(fed)
        self.p_room = rounds.room_price(fed)

    def _collect(self, function: Any, value: Any, schema: str) -> pd.DataFrame:
        shared = self.spark.sparkContext.broadcast(value)
        try:
            return pd.DataFrame(self.edges.mapInPandas(function(shared), schema).toPandas())
        finally:
            shared.destroy()

    def __call__(self, load: IntArray, relays: bool) -> RoundMoves:
        fed = self.fed
        givers = self._collect(_givers_pass, _Participants(fed, load), GIVERS_SCHEMA)
        is_giver = np.zeros(fed.size, dtype=bool)
        is_giver[givers["giver"].to_numpy(np.int64)] = True
        direct = self._collect(_offers_pass, _Participants(fed, load, is_giver), OFFERS_SCHEMA)
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
                    step=self._level,
                )
            )
        if relays and self.smooth:
            rows.append(
                rounds.smoothing_offers(
                    fed, load, is_giver, direct_givers, self.threshold, rows, step=self._level
                )
            )
        return rounds.accept_offers(rows)

    def _level(
        self,
        frontier: BoolArray,
        labelled: BoolArray,
        end: IntArray,
        low: FloatArray,
        high: FloatArray,
    ) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
        picked = self._collect(_level_pass, (frontier, labelled, end, low, high), LEVEL_SCHEMA)
        picked = picked.sort_values("v", kind="stable")
        return (
            picked["v"].to_numpy(np.int64),
            picked["w"].to_numpy(np.int64),
            picked["low"].to_numpy(np.float64),
            picked["high"].to_numpy(np.float64),
        )

    def close(self) -> None:
        self.edges.unpersist()


def default_partitions(spark: SparkSession) -> int:
    """Two partitions of the edge table per core Spark has: small enough tasks to balance."""
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
