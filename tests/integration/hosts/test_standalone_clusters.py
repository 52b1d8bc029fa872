"""A participant on its own Spark standalone cluster: S and T each run their fragments on a
cluster of their own (a master and a worker from the pyspark package), O in local mode. O.x moves
from S's cluster to T's with its state, and its output equals the reference."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from app.market.rounds import generate_large, run_rounds
from spark_jobs.scenarios.processes import Placement, free_port
from tests.integration.hosts.moves import move_o_x_from_s_to_t, placed_federation
from tests.support.components import require, require_java
from tests.support.spark_cluster import StandaloneCluster, cluster_problem, standalone_cluster

# Two clusters, three agents and their executors are a dozen JVMs: on a quiet machine a few
# minutes, on this shared one up to twenty (an executor JVM took 2.7 min to register under a
# load of 24).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]
# The agent's wait for its first executor (default 90 s) sized for that load.
EXECUTOR_WAIT = ("--spark-conf", "spark.fedload.executorWaitSeconds=600")


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, StandaloneCluster]]:
    require_java()
    require("a Spark standalone cluster from the pyspark package", cluster_problem())
    work = tmp_path_factory.mktemp("clusters")
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(standalone_cluster(f"cluster-{name}", work / name))
            for name in ("S", "T")
        }


def _on_cluster(cluster: StandaloneCluster, checkpoints: Path) -> Placement:
    # The checkpoint location as a URI: the storage the cluster's executors share (one
    # machine's directory here; HDFS or S3 across machines), read and written through pyarrow.
    return Placement(
        args=(
            "--spark-master",
            cluster.url,
            "--checkpoint-dir",
            checkpoints.as_uri(),
            *EXECUTOR_WAIT,
        )
    )


def test_a_stateful_fragment_moves_from_one_standalone_cluster_to_another(
    clusters: dict[str, StandaloneCluster], tmp_path: Path, spark
) -> None:
    shared = {name: tmp_path / "shared" / name for name in clusters}
    with placed_federation(
        tmp_path / "federation",
        agents={name: _on_cluster(clusters[name], shared[name]) for name in clusters},
    ) as fed:
        try:
            move_o_x_from_s_to_t(fed, spark)
        except BaseException:
            for cluster in clusters.values():
                print(cluster.logs())
            raise
        # The fragment ran on the clusters' executors, from the shared storage, with fedload's
        # code shipped to them (the workers have no fedload of their own to rely on).
        for name, cluster in clusters.items():
            assert cluster.shipped_archives(), f"no fedload zip reached {name}'s executors"
        assert (shared["T"] / "O.x" / "offsets").is_dir()
        assert not (fed.data_dir("T") / "checkpoints" / "O.x").exists()
        assert fed.stop_agents(("S", "T", "O"), timeout=60) == [0, 0, 0]


def test_an_agent_whose_cluster_gives_no_executor_stops_with_a_clear_error(tmp_path: Path) -> None:
    """No master at the URL: the agent does not wait forever for executors that never come,
    nor for Spark's own 60 s of retries: it stops within its wait, with the reason."""
    with placed_federation(tmp_path / "federation") as fed:
        nowhere = f"spark://127.0.0.1:{free_port()}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "app",
                "agent",
                "--participant",
                "T",
                "--api",
                fed.url,
                "--key",
                fed.keys["T"],
                "--data-dir",
                str(tmp_path / "T"),
                "--spark-master",
                nowhere,
                "--spark-eager",
                "--spark-conf",
                "spark.fedload.executorWaitSeconds=5",
                "--spark-conf",
                "spark.driver.memory=512m",
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert done.returncode == 3, done.stderr[-3000:]
    assert "Spark did not start" in done.stderr, done.stderr[-3000:]
    assert f"no Spark master accepted a connection at {nowhere} within 5 s" in done.stderr


def test_the_large_what_if_runs_on_a_standalone_cluster(
    clusters: dict[str, StandaloneCluster], tmp_path: Path
) -> None:
    """`fedload whatif --large` on a cluster (the planner's path at scale): the rounds run on the
    cluster's executors and end where the NumPy rounds end."""
    out = tmp_path / "large"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "whatif",
            "--large",
            "2000",
            "--k",
            "4",
            "--seed",
            "5",
            "--skew",
            "1.5",
            "--utilisation",
            "0.8",
            "--spark-master",
            clusters["S"].url,
            "--spark-conf",
            "spark.fedload.executorWaitSeconds=600",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        print(clusters["S"].logs())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    reference = run_rounds(
        generate_large(
            participants=2000,
            contracts_per_participant=4,
            load_skew=1.5,
            utilisation=0.8,
            seed=5,
        ),
        max_rounds=200,
    )
    assert summary["acceptable"] == reference.acceptable
    assert summary["rounds"] == len(reference.rounds)
    names = sorted(summary["final_load"])
    np.testing.assert_array_equal([summary["final_load"][n] for n in names], reference.final_load)
    assert clusters["S"].shipped_archives(), "no fedload code reached the cluster's executors"
