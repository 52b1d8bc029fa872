"""FIFO against FAIR scheduling inside each agent's Spark, same run, at the paper's settings.

Session 29 found the copies' serving batches stretching from ~2 s to 4-6 s while a DPC redo
batch runs (bench/ha/README.md, "Session 29"): in one Spark, FIFO scheduling runs every task of
the redo's batch (up to 20 s of input, the first one restoring the state) before the tasks of a
serving batch submitted after it. Every query now starts in a scheduler pool of its own
(``FragmentRuntime._launch``), so ``spark.scheduler.mode=FAIR`` (an agent's ``--spark-conf``)
shares the cores between the serving query and the redo task by task. This runs the tentative
scenario per failure length twice, FIFO (Spark's default) then FAIR, back to back
(``bench.ha.same_run``).

    PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
      .venv/bin/python -m bench.ha.scheduler_pools --failures 4 8 [--json FILE] [--workdir DIR]

Paper settings are the defaults here: 3 streams, 100 ms buckets, X = 3 s, 300 rows/s a source.
"""

from __future__ import annotations

from pathlib import Path

from bench.ha.same_run import main

ARMS = {mode: {"spark_conf": (("spark.scheduler.mode", mode),)} for mode in ("FIFO", "FAIR")}

if __name__ == "__main__":
    main(
        __doc__ or "",
        ARMS,
        Path(__file__).with_name("scheduler_pools.json"),
        "FIFO vs FAIR scheduling in each agent's Spark (tentative scenario)",
    )
