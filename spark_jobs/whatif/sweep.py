"""Sweeps: many generated federations, one simulation each, on Spark or in one Python process.

Both paths call ``simulate_row`` on the same rows, so they return the same figures (the tests and
the benchmark rely on it). On Spark the rows are never built on the driver: a ``range`` of
simulation ids is spread over the tasks and each task decodes its own parameters from the sweep
(a small frozen dataclass shipped in the closure), generates the federation and simulates it.
"""

from __future__ import annotations

import math
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from app.market.generate import generate_federation
from app.market.simulator import simulate
from spark_jobs.whatif.sweep_file import GridSweep

# Figures of one simulation, as results.parquet stores them next to the parameters.
FIGURES: dict[str, str] = {
    "acceptable": "boolean",
    "steps_to_acceptable": "bigint",
    "seconds_to_acceptable": "double",
    "moves": "bigint",
    "payments_total": "double",
    "cost": "double",
    "cost_lower_bound": "double",
    "cost_ratio": "double",
    "final_overloaded": "bigint",
    # The one acceptability rule's reasons for the final allocation, "; "-joined; None when it
    # is acceptable.
    "why_not_acceptable": "string",
    "error": "string",
}
PARAMETERS: dict[str, str] = {
    "id": "bigint",
    "participants": "bigint",
    "contracts_per_participant": "bigint",
    "price_range_width": "double",
    "load_skew": "double",
    "capacity_spread": "double",
    "tasks_per_participant": "bigint",
    "overload": "double",
    "seed": "bigint",
}
RESULT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in {**PARAMETERS, **FIGURES}.items())

Progress = Callable[[int], None]  # called with the number of simulations finished so far


def simulate_row(row: dict[str, Any], max_steps: int | None = None) -> dict[str, Any]:
    """Generate the row's federation and simulate it; an engine failure is recorded, not raised,
    so one bad federation does not throw away a two-thousand-run sweep."""
    out: dict[str, Any] = {name: row[name] for name in PARAMETERS}
    try:
        doc = generate_federation(
            participants=int(row["participants"]),
            contracts_per_participant=int(row["contracts_per_participant"]),
            price_range_width=float(row["price_range_width"]),
            load_skew=float(row["load_skew"]),
            capacity_spread=float(row["capacity_spread"]),
            seed=int(row["seed"]),
            tasks_per_participant=int(row["tasks_per_participant"]),
            overload=float(row["overload"]),
        )
        result = simulate(doc, max_steps=max_steps)
    except Exception as exc:  # recorded per row and reported by the command with a failing exit
        out.update({name: None for name in FIGURES})
        out["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        return out
    bound = result.cost_lower_bound
    out.update(
        acceptable=bool(result.acceptable),
        steps_to_acceptable=result.steps_to_acceptable,
        seconds_to_acceptable=result.seconds_to_acceptable,
        moves=int(result.moves),
        payments_total=float(result.payments_total),
        cost=float(result.cost),
        cost_lower_bound=float(bound),
        cost_ratio=float(result.cost) / bound if bound and math.isfinite(bound) else None,
        final_overloaded=sum(
            1
            for name, load in result.final_load.items()
            if load > result.thresholds.get(name, math.inf)
        ),
        why_not_acceptable="; ".join(result.reasons) if not result.acceptable else None,
        error=None,
    )
    return out


def _frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One dtype per column whichever path produced the rows (Spark's toPandas or Python):
    nullable integers and booleans, NaN for a missing float, None for no error."""
    frame = pd.DataFrame.from_records(records, columns=[*PARAMETERS, *FIGURES])
    for name, kind in {**PARAMETERS, **FIGURES}.items():
        if kind == "bigint":
            frame[name] = pd.to_numeric(frame[name]).astype("Int64")
        elif kind == "double":
            frame[name] = pd.to_numeric(frame[name]).astype("float64")
        elif kind == "boolean":
            frame[name] = frame[name].astype("boolean")
        else:
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    return frame


def run_in_process(sweep: GridSweep, progress: Progress | None = None) -> pd.DataFrame:
    """The same sweep, one simulation after another in this Python process (the baseline)."""
    records = []
    for i in range(sweep.size):
        records.append(simulate_row(sweep.row(i), sweep.max_steps))
        if progress is not None:
            progress(i + 1)
    return _frame(records)


def _simulate_partitions(
    sweep: GridSweep, slices: int
) -> Callable[[Iterator[pd.DataFrame]], Iterator[Any]]:
    """Slot i of the range is simulation (i % block) * slices + i // block: task b runs
    simulations b, b + slices, b + 2 slices, ... Consecutive ids share parameters (the seeds vary
    fastest, k and the price range slowest), so striding spreads the costly corners of the grid
    evenly over the tasks instead of handing them all to the last one."""
    block = math.ceil(sweep.size / slices)

    def simulate_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for batch in batches:
            records = []
            for slot in batch["id"]:
                index = (int(slot) % block) * slices + int(slot) // block
                if index < sweep.size:
                    records.append(simulate_row(sweep.row(index), sweep.max_steps))
            yield _frame(records)

    return simulate_batches


def run_on_spark(
    spark: Any,
    sweep: GridSweep,
    progress: Progress | None = None,
    *,
    partitions: int | None = None,
) -> pd.DataFrame:
    """One Spark task per slice of simulations; results collected in id order.

    A few slices per core: enough for the progress bar (which counts finished tasks) to move and
    for a slow slice not to hold the others up, few enough that per-task overhead stays small
    next to the simulations themselves.
    """
    context = spark.sparkContext
    slices = partitions or max(1, min(sweep.size, context.defaultParallelism * 4))
    # A range of exactly slices x block slots splits into one contiguous block per task.
    ids = spark.range(0, slices * math.ceil(sweep.size / slices), numPartitions=slices)
    results = ids.mapInPandas(_simulate_partitions(sweep, slices), schema=RESULT_SCHEMA)
    group = f"fedload-whatif-{sweep.name}-{time.monotonic_ns()}"
    context.setJobGroup(group, f"what-if sweep {sweep.name}")
    done = threading.Event()
    watcher = None
    if progress is not None:
        watcher = threading.Thread(
            target=_watch, args=(context, group, slices, sweep.size, progress, done), daemon=True
        )
        watcher.start()
    try:
        frame = results.toPandas()
    finally:
        done.set()
        if watcher is not None:
            watcher.join()
        context.setLocalProperty("spark.jobGroup.id", None)
    if progress is not None:
        progress(sweep.size)
    return _frame(frame.sort_values("id").to_dict("records"))


def _watch(
    context: Any, group: str, slices: int, total: int, progress: Progress, done: threading.Event
) -> None:
    """Poll Spark's status tracker: finished tasks of the sweep's job, scaled to simulations."""
    tracker = context.statusTracker()
    while not done.wait(0.25):
        finished = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else []:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None and stage.numTasks == slices:
                    finished = max(finished, stage.numCompletedTasks)
        progress(min(total, finished * total // slices))
