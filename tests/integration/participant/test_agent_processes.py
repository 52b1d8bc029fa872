"""The participant for real: the service and three ``fedload agent`` processes, each with its own
Spark, move a stateful fragment between processes over Flight (move-federation.yaml).

On PostgreSQL the agents also serve TLS (``fedload agent --tls-cert/--tls-key/--tls-ca``, issue
14, certificates made at run time): the same move, the same reference comparison, over
``grpc+tls://`` endpoints, and an outsider without the authority is not spoken to. One
federation per backend, so TLS costs the suite no extra federation."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.scenarios.reference import check_fragment
from tests.integration.participant.agents import (
    GENERATOR,
    federation,
    grows,
    host_of,
    output_rows,
    overload_s,
    tls_flags,
    trusting,
    wait_for,
)
from tests.integration.participant.outsiders import probe_outsiders
from tests.support.certificates import issue

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize(
    ("db_url", "tls"),
    [pytest.param("sqlite", False, id="sqlite"), pytest.param("postgres", True, id="postgres-tls")],
    indirect=["db_url"],
)
def test_a_stateful_fragment_moves_between_agent_processes_and_outlives_a_service_restart(
    db_url, tls, tmp_path, spark
):
    issued = issue(tmp_path / "tls") if tls else None
    agent_args = tls_flags(issued) if issued is not None else ()
    with (
        trusting(issued.ca if issued is not None else None),
        federation(tmp_path / "federation", db_url, agent_args=agent_args) as fed,
    ):
        for name in ("O", "S", "T"):
            fed.start_agent(name)
        admin = fed.admin()
        wait_for("O.x to write output from S", lambda: output_rows(admin, "O.x") > 0, 180)
        assert host_of(admin, "O.x") == "S"
        scheme = "grpc+tls://" if tls else "grpc://"
        assert all(str(admin.endpoint(name)).startswith(scheme) for name in ("O", "S", "T"))

        overload_s(admin)
        moved = wait_for("T to record the move", lambda: list(fed.moves()))
        assert host_of(admin, "O.x") == "T"
        assert [(m["task"], m["src"], m["dst"], m["reason"]) for m in moved] == [
            ("O.x", "S", "T", "load")
        ]
        assert moved[0]["state_bytes"] > 10_000, "the window state travelled with the fragment"
        assert 0.24 <= moved[0]["price"] <= 0.26
        wait_for(
            "S to drop its copy of O.x",
            lambda: not (fed.data_dir("S") / "checkpoints" / "O.x").exists(),
        )
        probe_outsiders(fed)  # issue 14: outsiders' Flight calls change nothing here

        # The service goes away for a while: agents keep their fragments running and come back.
        rows_before_outage = output_rows(admin, "O.x")
        assert fed.service is not None
        fed.service.kill()
        time.sleep(4)
        assert all(agent.alive() for agent in fed.agents.values()), "an agent died with the service"
        fed.service.start()
        fed.wait_for_service()
        wait_for(
            "every agent to heartbeat again",
            lambda: all(p["liveness"] == "online" for p in admin._call("GET", "/v1/participants")),
        )
        wait_for(
            "O.x's output to grow at T after the outage",
            lambda: output_rows(admin, "O.x") > rows_before_outage + 20,
        )
        assert host_of(admin, "O.x") == "T"
        assert len(set(fed.processes().values())) == 4  # three agents and the service

        # Move-back: O makes room and T gets loaded; once the contract's minimum move duration
        # has passed, keeping O.x costs T more than O pays, so T returns it and O takes it.
        admin._call("PATCH", "/v1/tasks/O.base", json={"load": 0, "pinned": True})
        admin._call("PATCH", "/v1/tasks/T.base", json={"load": 78, "pinned": True})
        back = wait_for(
            "T to return O.x to O",
            lambda: [m for m in fed.moves() if m["reason"] == "move_back"],
        )
        assert [(m["task"], m["src"], m["dst"]) for m in back] == [("O.x", "T", "O")]
        assert back[0]["state_bytes"] > 10_000
        assert host_of(admin, "O.x") == "O"
        there, returned = (
            sorted(
                (m for m in admin.movements() if m["status"] == "committed"), key=lambda m: m["id"]
            )
        )[-2:]
        held = (
            datetime.fromisoformat(returned["prepared_at"])
            - datetime.fromisoformat(there["finished_at"])
        ).total_seconds()
        assert held >= 10, "returned before the contract's minimum move duration"
        assert admin.task("O.x")["price"] is None  # at home: nobody pays for it any more
        grows(admin, "O.x")

        comparison = check_fragment(
            spark, admin.endpoint("O"), admin.task("O.x"), GENERATOR, registry_tokens(admin)
        )
        assert comparison.matches, comparison.as_dict()
        assert comparison.rows > 100

        # SIGTERM ends each agent cleanly: its tick finishes, its fragments stop after their
        # last batch, and it exits 0 (a crash test restarts a host from its checkpoint).
        assert fed.stop_agents(("S", "T", "O"), timeout=60) == [0, 0, 0]
