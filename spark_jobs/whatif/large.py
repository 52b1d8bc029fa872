"""The very large federation on Spark: one round of the Bounded-Price Mechanism per DataFrame pass.

Same algorithm as ``app/market/rounds.py`` (read its docstring for the model: prices are the
protocol's negotiated price, ``app.market.protocol``, and acceptability is the one rule of
``app.market.acceptability``), with the state held in two tables: ``participants`` (id,
capacity, scale, threshold, load) and the contract edge table (both directions of every contract
with its price range). A round is:

- offers: the edge table joined with the giver's and the taker's state, prices and amounts
  computed per edge, a left anti-join so givers do not take, and a ``row_number`` window per giver
  picking its cheapest partner;
- acceptances: a window per taker ordered by price (highest first) whose running sum of offered
  units and running maximum give each offer's accepted part;
- loads: accepted units aggregated per participant and joined back onto the state.

The arithmetic is written in the same operation order as the NumPy reference so both produce
identical doubles (IEEE, no fused operations), which the integration tests rely on.
Nothing here collects more than one row per participant to the driver, and only when asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from app.market.acceptability import acceptable_from_counts
from app.market.rounds import LargeFederation, RoundRecord

INF = float("inf")


def _unit_cost(capacity: Column, scale: Column, level: Column) -> Column:
    room = capacity - level
    return F.when(room > 0, scale * capacity / (room * (room + F.lit(1.0)))).otherwise(F.lit(INF))


def _root(capacity: Column, scale: Column, price: Column) -> Column:
    return (F.lit(-1.0) + F.sqrt(F.lit(1.0) + F.lit(4.0) * scale * capacity / price)) / F.lit(2.0)


def _keep_level(capacity: Column, scale: Column, price: Column) -> Column:
    return F.greatest(F.floor(capacity - _root(capacity, scale, price)), F.lit(0)).cast("long")


def _fill_level(capacity: Column, scale: Column, price: Column) -> Column:
    safe = F.when(price > 0, price).otherwise(F.lit(1.0))
    level = F.greatest(F.ceil(capacity - _root(capacity, scale, safe)) - F.lit(1), F.lit(0))
    return F.when(price > 0, level.cast("long")).otherwise(F.lit(0).cast("long"))


def _finite(value: Column) -> Column:
    return (value < F.lit(INF)) & (value > F.lit(-INF))


def _negotiated(giver_res: Column, taker_res: Column, low_: Column, high_: Column) -> Column:
    """``app.market.protocol.negotiated_prices`` as a column, operation for operation (max, min,
    sum, halve): the midpoint of the reservations' overlap with the range; null for no deal."""
    low = F.greatest(taker_res, low_)
    high = F.least(giver_res, high_)
    deal = (taker_res <= giver_res) & (low <= high) & _finite(low) & _finite(high) & (low_ <= high_)
    return F.when(deal, (low + high) / F.lit(2.0))


def _mm1_cost(capacity: Column, scale: Column, load: Column) -> Column:
    room = capacity - load
    return F.when(room > 0, scale * load / room).otherwise(F.lit(INF))


@dataclass(frozen=True)
class LargeTables:
    participants: DataFrame  # id, capacity, scale, load
    contracts: DataFrame  # a, b, price_min, price_max (one row per contract)
    hysteresis: float


def federation_tables(spark: SparkSession, fed: LargeFederation) -> LargeTables:
    """The two input tables for a federation generated on the driver (tests, benchmarks)."""
    participants = spark.createDataFrame(
        pd.DataFrame(
            {
                "id": np.arange(fed.size, dtype=np.int64),
                "capacity": fed.capacity,
                "scale": fed.scale,
                "load": fed.load.astype(np.int64),
            }
        )
    )
    contracts = spark.createDataFrame(
        pd.DataFrame(
            {
                "a": fed.edge_a,
                "b": fed.edge_b,
                "price_min": fed.price_min,
                "price_max": fed.price_max,
            }
        )
    )
    return LargeTables(participants, contracts, fed.hysteresis)


@dataclass
class LargeRunResult:
    rounds: list[RoundRecord]
    seconds_per_round: list[float]
    initial_cost: float
    initial_acceptable: bool
    final_state: DataFrame  # id, capacity, scale, threshold, load
    loads: list[np.ndarray] = field(default_factory=list)

    @property
    def acceptable(self) -> bool:
        return self.rounds[-1].acceptable if self.rounds else self.initial_acceptable

    @property
    def rounds_to_acceptable(self) -> int | None:
        if self.initial_acceptable:
            return 0
        return next((r.round for r in self.rounds if r.acceptable), None)


def directed_edges(contracts: DataFrame) -> DataFrame:
    forward = contracts.select(
        F.col("a").alias("giver"), F.col("b").alias("taker"), "price_min", "price_max"
    )
    backward = contracts.select(
        F.col("b").alias("giver"), F.col("a").alias("taker"), "price_min", "price_max"
    )
    return forward.unionByName(backward)


def initial_state(tables: LargeTables, edges: DataFrame) -> DataFrame:
    """Participants with their threshold and the load below which they can never shed."""
    delta = F.lit(tables.hysteresis)
    per = edges.groupBy(F.col("giver").alias("id")).agg(
        F.avg((F.col("price_min") + F.col("price_max")) / F.lit(2.0)).alias("p_star"),
        F.min("price_min").alias("p_floor"),
    )
    state = tables.participants.join(per, "id", "left")
    cap, scale = F.col("capacity"), F.col("scale")
    threshold = F.when(
        F.col("p_star").isNotNull(), _keep_level(cap, scale, F.col("p_star") + delta)
    ).otherwise((F.ceil(cap) - F.lit(1)).cast("long"))
    # Every negotiated price is at least the cheapest contract's price_min, so a participant at or
    # below this load has nothing to offer on any contract: it is skipped as a giver (pure pruning).
    shed_floor = F.when(
        F.col("p_floor").isNotNull(), _keep_level(cap, scale, F.col("p_floor") + delta)
    ).otherwise(F.col("load") + F.lit(1))
    return state.select(
        "id",
        "capacity",
        "scale",
        threshold.alias("threshold"),
        shed_floor.alias("shed_floor"),
        F.col("p_star"),
        F.col("load").cast("long").alias("load"),
    )


def plan_round(
    state: DataFrame, edges: DataFrame, hysteresis: float, *, relays: bool = True
) -> DataFrame:
    """One round's offers with their accepted part: giver, taker, price, offered, accepted, hops.

    Direct offers, then chained offers of the participants still above threshold (``relays``),
    as ``app.market.rounds.plan_round``. Runs Spark jobs while it plans (the relay search is
    breadth-first, one join per level); the result is checkpointed by the caller.
    """
    givers = state.filter(F.col("load") > F.col("shed_floor")).select(
        F.col("id").alias("giver"),
        F.col("capacity").alias("g_cap"),
        F.col("scale").alias("g_scale"),
        F.col("load").alias("g_load"),
    )
    takers = state.select(
        F.col("id").alias("taker"),
        F.col("capacity").alias("t_cap"),
        F.col("scale").alias("t_scale"),
        F.col("load").alias("t_load"),
    )
    joined = edges.join(givers, "giver").join(takers, "taker")
    candidates = _priced_offers(joined, hysteresis, "price_min", "price_max")
    busy = candidates.select(F.col("giver").alias("id")).distinct()
    live = candidates.join(busy.withColumnRenamed("id", "taker"), "taker", "left_anti")
    cheapest = Window.partitionBy("giver").orderBy(F.col("price").asc(), F.col("taker").asc())
    chosen = (
        live.withColumn("rank", F.row_number().over(cheapest))
        .filter(F.col("rank") == 1)
        .drop("rank")
        .select("giver", "taker", "price", "offered", "room", F.lit(1).cast("long").alias("hops"))
    )
    if relays:
        chosen = chosen.localCheckpoint(eager=True)
        relayed = _relay_offers(state, edges, hysteresis, busy, chosen)
        if relayed is not None:
            chosen = chosen.unionByName(relayed)
    order = Window.partitionBy("taker").orderBy(F.col("price").desc(), F.col("giver").asc())
    running = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    accepted_total = F.greatest(
        F.max(F.least(F.sum("offered").over(running), F.col("room"))).over(running), F.lit(0)
    )
    return (
        chosen.withColumn("accepted_total", accepted_total)
        .withColumn(
            "accepted",
            F.col("accepted_total")
            - F.coalesce(F.lag("accepted_total").over(order), F.lit(0)).cast("long"),
        )
        .select("giver", "taker", "price", "offered", F.col("accepted").cast("long"), "hops")
    )


def _priced_offers(joined: DataFrame, hysteresis: float, low: str, high: str) -> DataFrame:
    """Offers on (giver, taker) rows carrying both sides' state and a price range [low, high]:
    the negotiated price, what the giver offers and how far the taker fills, rows without a deal
    or without anything to move dropped (the NumPy reference computes them and masks)."""
    delta = F.lit(hysteresis)
    g_cap, g_scale, g_load = F.col("g_cap"), F.col("g_scale"), F.col("g_load")
    t_cap, t_scale, t_load = F.col("t_cap"), F.col("t_scale"), F.col("t_load")
    out_g = _unit_cost(g_cap, g_scale, g_load.cast("double"))
    in_t = _unit_cost(t_cap, t_scale, t_load.cast("double") + F.lit(1.0))
    priced = joined.withColumn(
        "price", _negotiated(out_g - delta, in_t + delta, F.col(low), F.col(high))
    ).filter(F.col("price").isNotNull())
    price = F.col("price")
    return (
        priced.withColumn(
            "offered", g_load - F.least(_keep_level(g_cap, g_scale, price + delta), g_load)
        )
        .withColumn("room", _fill_level(t_cap, t_scale, price - delta) - t_load)
        .filter((F.col("offered") >= 1) & (F.col("room") >= 1))
        .select("giver", "taker", "price", "offered", "room")
    )


def route_to_room(edges: DataFrame, has_room: DataFrame, wanted: DataFrame) -> DataFrame:
    """``app.market.rounds.route_to_room`` level by level: labels (id, dist, end, low, high).

    ``has_room`` and ``wanted`` are one-column tables of participant ids. Each level is one join
    of the edges with the previous level's labels, checkpointed so no level carries the others'
    lineage.
    """
    frontier = has_room.select(
        "id",
        F.lit(0).cast("long").alias("dist"),
        F.col("id").alias("end"),
        F.lit(-INF).alias("low"),
        F.lit(INF).alias("high"),
    ).localCheckpoint(eager=True)
    labels = frontier
    level = 0
    while frontier.count() > 0 and wanted.join(labels, "id", "left_anti").count() > 0:
        level += 1
        reached = (
            edges.join(frontier.withColumnRenamed("id", "taker"), "taker")
            .join(labels.select(F.col("id").alias("giver")), "giver", "left_anti")
            .select(
                F.col("giver").alias("id"),
                "end",
                F.col("taker").alias("via"),
                F.greatest(F.col("low"), F.col("price_min")).alias("low"),
                F.least(F.col("high"), F.col("price_max")).alias("high"),
            )
            .filter(F.col("low") <= F.col("high"))
        )
        best = reached.groupBy("id").agg(F.min(F.struct("end", "via", "low", "high")).alias("b"))
        frontier = best.select(
            "id",
            F.lit(level).cast("long").alias("dist"),
            F.col("b.end").alias("end"),
            F.col("b.low").alias("low"),
            F.col("b.high").alias("high"),
        ).localCheckpoint(eager=True)
        # A union of checkpointed levels: its plan grows by one leaf per level, not per round.
        labels = labels.unionByName(frontier)
    return labels


def _relay_offers(
    state: DataFrame, edges: DataFrame, hysteresis: float, busy: DataFrame, chosen: DataFrame
) -> DataFrame | None:
    delta = F.lit(hysteresis)
    cap, scale, load = F.col("capacity"), F.col("scale"), F.col("load")
    contracted = state.filter(F.col("p_star").isNotNull())
    has_room = (
        contracted.filter(load < _fill_level(cap, scale, F.col("p_star") - delta))
        .select("id")
        .join(busy, "id", "left_anti")
        .localCheckpoint(eager=True)
    )
    stuck = (
        contracted.filter(load > F.col("threshold"))
        .select("id")
        .join(chosen.select(F.col("giver").alias("id")), "id", "left_anti")
        .localCheckpoint(eager=True)
    )
    if stuck.count() == 0 or has_room.count() == 0:
        return None
    labels = route_to_room(edges, has_room, stuck)
    routed = stuck.join(labels.filter(F.col("dist") >= 1), "id").select(
        F.col("id").alias("giver"), F.col("end").alias("taker"), "dist", "low", "high"
    )
    joined = routed.join(
        state.select(
            F.col("id").alias("giver"),
            F.col("capacity").alias("g_cap"),
            F.col("scale").alias("g_scale"),
            F.col("load").alias("g_load"),
        ),
        "giver",
    ).join(
        state.select(
            F.col("id").alias("taker"),
            F.col("capacity").alias("t_cap"),
            F.col("scale").alias("t_scale"),
            F.col("load").alias("t_load"),
        ),
        "taker",
    )
    hops = routed.select("giver", F.col("dist").alias("hops"))
    return _priced_offers(joined, hysteresis, "low", "high").join(hops, "giver")


def apply_round(state: DataFrame, moves: DataFrame) -> DataFrame:
    gained = moves.select(F.col("taker").alias("id"), F.col("accepted").alias("change"))
    lost = moves.select(F.col("giver").alias("id"), (-F.col("accepted")).alias("change"))
    change = gained.unionByName(lost).groupBy("id").agg(F.sum("change").alias("change"))
    return (
        state.join(change, "id", "left")
        .withColumn("load", F.col("load") + F.coalesce(F.col("change"), F.lit(0)).cast("long"))
        .drop("change")
    )


@dataclass(frozen=True)
class StateFigures:
    cost: float
    above: int
    acceptable: bool


def state_figures(state: DataFrame) -> StateFigures:
    cap, scale, load = F.col("capacity"), F.col("scale"), F.col("load")
    row = state.agg(
        F.sum(_mm1_cost(cap, scale, load.cast("double"))).alias("cost"),
        F.sum("load").alias("load"),
        F.sum("threshold").alias("threshold"),
        F.sum(F.when(load > F.col("threshold"), 1).otherwise(0)).alias("above"),
        F.sum(F.when(load < F.col("threshold"), 1).otherwise(0)).alias("below"),
    ).first()
    assert row is not None
    acceptable = acceptable_from_counts(
        overloaded=row["load"] > row["threshold"], over=row["above"], with_room=row["below"]
    )
    return StateFigures(float(row["cost"]), int(row["above"]), acceptable)


def _loads(state: DataFrame) -> np.ndarray:
    frame = pd.DataFrame(state.select("id", "load").toPandas())
    return frame.sort_values("id")["load"].to_numpy(dtype=np.int64)


def run_rounds(
    spark: SparkSession,
    tables: LargeTables,
    *,
    max_rounds: int = 200,
    record_loads: bool = False,
    on_round: Callable[[RoundRecord, float], None] | None = None,
    relays: bool = True,
) -> LargeRunResult:
    """Rounds until no offer is made or ``max_rounds``; ``on_round`` sees each round's record."""
    edges = directed_edges(tables.contracts).cache()
    # Each round's state is cut loose from its lineage, or the plan would grow with every round.
    state = initial_state(tables, edges).localCheckpoint(eager=True)
    start = state_figures(state)
    above = start.above
    result = LargeRunResult([], [], start.cost, start.acceptable, state)
    if record_loads:
        result.loads.append(_loads(state))
    for r in range(1, max_rounds + 1):
        began = time.perf_counter()
        # Only a participant above its threshold offers along a chain: with none (the previous
        # round's count), the relay search and its jobs are skipped.
        chains = relays and above > 0
        moves = plan_round(state, edges, tables.hysteresis, relays=chains).localCheckpoint(
            eager=True
        )
        moved = F.col("accepted") > 0
        stats = moves.agg(
            F.count(F.lit(1)).alias("offers"),
            F.sum(F.when(moved, 1).otherwise(0)).alias("moves"),
            F.sum(F.when(moved & (F.col("hops") > 1), 1).otherwise(0)).alias("relayed"),
            F.sum("accepted").alias("units"),
            F.sum(F.col("accepted") * F.col("price")).alias("volume"),
        ).first()
        assert stats is not None
        if stats["offers"] == 0:
            break
        state = apply_round(state, moves).localCheckpoint(eager=True)
        figures = state_figures(state)
        above = figures.above
        seconds = time.perf_counter() - began
        record = RoundRecord(
            round=r,
            offers=int(stats["offers"]),
            moves=int(stats["moves"]),
            units_moved=int(stats["units"]),
            payment_volume=float(stats["volume"]),
            cost=figures.cost,
            above_threshold=figures.above,
            acceptable=figures.acceptable,
            relayed=int(stats["relayed"]),
        )
        result.rounds.append(record)
        result.seconds_per_round.append(seconds)
        result.final_state = state
        if record_loads:
            result.loads.append(_loads(state))
        if on_round is not None:
            on_round(record, seconds)
    edges.unpersist()
    return result
