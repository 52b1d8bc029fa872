"""One stateful move between agent processes, wherever the federation's processes run.

The agent-process tests' federation (``move-federation.yaml``): O owns a seeded generator and
the stateful fragment O.x, which S hosts; raising S's declared load makes S shed O.x to T. The
network-namespace and standalone-cluster tests place the processes differently and run this.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from app.federation.document import load_federation
from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.scenarios.processes import AgentSettings, Placement, ProcessFederation
from spark_jobs.scenarios.reference import check_fragment
from tests.integration.participant.agents import (
    FEDERATION,
    GENERATOR,
    LEASE_SECONDS,
    eager,
    grows,
    host_of,
    output_rows,
    overload_s,
    wait_for,
)

# Each agent starts a JVM and PySpark workers in its own host: 1-2 minutes each under the load
# of a shared 2-vCPU machine (90 s to a session, 50 s more to a first job, measured under a
# load of 20), far less on a quiet one.
START_TIMEOUT_S = 600.0
# Each agent's Spark driver: small, as the machine is shared (the default heap is 1 GB).
SMALL_DRIVER = ("--spark-conf", "spark.driver.memory=512m")


@contextmanager
def placed_federation(
    work: Path,
    *,
    service: Placement | None = None,
    agents: dict[str, Placement] | None = None,
) -> Iterator[ProcessFederation]:
    fed = ProcessFederation(
        load_federation(FEDERATION),
        work,
        lease_seconds=LEASE_SECONDS,
        agent_settings=AgentSettings(
            offer_interval=2.0, spark_eager=True, hysteresis=0.005, extra_args=SMALL_DRIVER
        ),
        service_placement=service or Placement(),
        placements=dict(agents or {}),
    )
    try:
        fed.start()
        yield fed
    except BaseException:
        if fed.service is not None:
            print(f"--- the service's log ---\n{fed.service.tail(40)}")
        for name, agent in fed.agents.items():
            print(f"--- {name}'s agent log ---\n{agent.tail(60)}")
        raise
    finally:
        fed.close()


def move_o_x_from_s_to_t(fed: ProcessFederation, spark: SparkSession) -> dict[str, object]:
    """Start O, S and T; S sheds O.x to T mid-stream; T's output equals the reference. Returns
    T's record of the move."""
    for name in ("O", "S", "T"):
        fed.start_agent(name, spark_eager=eager(name))
    admin = fed.admin()
    wait_for("O.x to write output from S", lambda: output_rows(admin, "O.x") > 0, START_TIMEOUT_S)
    assert host_of(admin, "O.x") == "S"

    overload_s(admin)
    moved = wait_for("T to record the move", lambda: list(fed.moves()), START_TIMEOUT_S)
    assert [(m["task"], m["src"], m["dst"], m["reason"]) for m in moved] == [
        ("O.x", "S", "T", "load")
    ]
    assert moved[0]["state_bytes"] > 10_000, "the window state travelled with the fragment"
    assert host_of(admin, "O.x") == "T"
    grows(admin, "O.x", timeout=START_TIMEOUT_S)

    endpoint = admin.endpoint("O")
    assert endpoint is not None
    comparison = check_fragment(
        spark, endpoint, admin.task("O.x"), GENERATOR, registry_tokens(admin)
    )
    assert comparison.matches, comparison.as_dict()
    assert comparison.rows > 50
    return moved[0]
