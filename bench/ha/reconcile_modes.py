"""A reconciling copy that goes on serving beside its redo, against one that stands down for it
(Borealis's way), same run, at the paper's settings.

Sessions 29-30 found the copies' serving batches stretching from ~2 s to 4-6 s while a DPC redo
runs, on the reconciling copy and on the other (four Spark processes on two vCPUs), and FAIR
pools inside one Spark no better (``bench.ha.scheduler_pools``). In Borealis (SIGMOD 2005,
section 4.5) replicas reconcile in turn while another serves: ``fedload agent --reconcile
alone`` stops the reconciling copy's serving query for the redo's time and advertises
STABILIZATION, so the consumer reads the other copy, and the redo runs without yielding. This
runs the tentative scenario per failure length "alongside" (the default) then "alone", back to
back (``bench.ha.same_run``). The figure to read is the first version's maximum added latency:
the stood-down copy's own buckets of that time first leave at its switch, by design.

    PYSPARK_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1 \\
      .venv/bin/python -m bench.ha.reconcile_modes --failures 4 8 [--json FILE] [--workdir DIR]

Paper settings are the defaults here: 3 streams, 100 ms buckets, X = 3 s, 300 rows/s a source.
"""

from __future__ import annotations

from pathlib import Path

from bench.ha.same_run import main

# Not "auto": in this scenario the primary host serves throughout, so it stands down as "alone".
ARMS = {mode: {"reconcile": mode} for mode in ("alongside", "alone")}

if __name__ == "__main__":
    main(
        __doc__ or "",
        ARMS,
        Path(__file__).with_name("reconcile_modes.json"),
        "Reconciling alongside the serving query vs alone (tentative scenario)",
    )
