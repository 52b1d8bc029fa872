"""A crash failover recorded by the real registry: the service in uvicorn, the nodes as
processes. The replica placed through the API takes over; the registry's movement commits it as
the host at epoch 1 (the fence C applies), and the replica record becomes the task itself."""

from __future__ import annotations

import time

import pytest

from app.participant.client import FedloadClient
from app.settings import Settings
from spark_jobs.ha.scenarios import Timings, run_crash, run_tentative
from spark_jobs.runtime.coordinator import PreparedMove
from spark_jobs.runtime.registry_coordinator import RegistryCoordinator
from tests.support.live_server import serve

ADMIN = "ha-admin-key"
pytestmark = pytest.mark.timeout(120)


class RegisteredAs:
    """The scenario calls its fragment "B"; the registry knows it by its per-owner name "B.B"
    (issue 15): the same coordinator, each fragment name translated on the way in."""

    def __init__(self, inner: RegistryCoordinator, names: dict[str, str]) -> None:
        self.inner, self.names = inner, names

    def prepare(self, fragment: str, source: str, target: str, reason: str) -> PreparedMove:
        return self.inner.prepare(self.names[fragment], source, target, reason)

    def commit(self, movement_id: int) -> int:
        return self.inner.commit(movement_id)

    def abort(self, movement_id: int, why: str) -> None:
        self.inner.abort(movement_id, why)

    def current_epoch(self, fragment: str) -> int:
        return self.inner.current_epoch(self.names[fragment])

    def host(self, fragment: str) -> str:
        return self.inner.host(self.names[fragment])


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_passive_standby_failover_through_the_registry(db_url: str, tmp_path) -> None:
    # The registry takes the failover only once it sees B failed: silent for 3 x 0.2 s.
    settings = Settings(
        database_url=db_url, admin_key=ADMIN, environment="test", heartbeat_interval_seconds=0.2
    )
    with serve(settings) as url:
        admin = FedloadClient(url, ADMIN)
        clients = {}
        for name in ("B", "B2"):
            key = admin._call("POST", "/v1/participants", json={"name": name, "capacity": 100})
            clients[name] = FedloadClient(url, key["api_key"])
        # B's agent heartbeats once as it starts; the scenario's nodes run no heartbeat loop to
        # the registry, so the registry sees B failed from then on (well before the crash).
        clients["B"]._call("POST", "/v1/participants/me/heartbeat", json={})
        terms = {
            "partner": "B2",
            "price_min": 0.2,
            "price_max": 0.3,
            "availability": {"recovery": "precise", "replica_hosting": True},
        }
        contract = clients["B"]._call("POST", "/v1/contracts", json=terms)
        clients["B2"]._call("POST", f"/v1/contracts/{contract['id']}/accept", json={"version": 1})
        clients["B"]._call("POST", "/v1/tasks", json={"name": "B.B", "load": 4})
        placed = clients["B"]._call(
            "POST", "/v1/tasks/B.B/replicas", json={"k": 1, "technique": "passive_standby"}
        )
        assert [(r["host"], r["technique"]) for r in placed] == [("B2", "passive_standby")]
        try:
            coordinator = RegisteredAs(RegistryCoordinator(clients), {"B": "B.B"})
            report = run_crash(Timings.quick(), tmp_path, "passive_standby", coordinator)
            assert report["checks"] == {name: True for name in report["checks"]}, report
            lease = admin.lease("B.B")
            assert (lease["host"], lease["epoch"]) == ("B2", 1)
            moves = admin._call("GET", "/v1/movements")
            assert [(m["reason"], m["status"], m["to"]) for m in moves] == [
                ("failover", "committed", "B2")
            ]
            # B2 hosts the task now; it is no longer listed as a replica of it.
            assert admin._call("GET", "/v1/replicas") == []
        finally:
            for client in (admin, *clients.values()):
                client.close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_replica_states_reach_the_admin_api_during_a_partition(db_url: str, tmp_path) -> None:
    """C and its replica C2 report their DPC state; during the partition the admin sees the
    replica in UP_FAILURE, after reconciliation STABLE again."""
    with serve(Settings(database_url=db_url, admin_key=ADMIN, environment="test")) as url:
        admin = FedloadClient(url, ADMIN)
        keys = {}
        for name in ("C", "C2"):
            keys[name] = admin._call(
                "POST", "/v1/participants", json={"name": name, "capacity": 100}
            )["api_key"]
        owner, host = FedloadClient(url, keys["C"]), FedloadClient(url, keys["C2"])
        terms = {
            "partner": "C2",
            "price_min": 0.2,
            "price_max": 0.3,
            "availability": {"recovery": "precise", "replica_hosting": True},
        }
        contract = owner._call("POST", "/v1/contracts", json=terms)
        host._call("POST", f"/v1/contracts/{contract['id']}/accept", json={"version": 1})
        owner._call("POST", "/v1/tasks", json={"name": "C.C", "load": 3})
        owner._call("POST", "/v1/tasks/C.C/replicas", json={"k": 1})
        try:
            report = run_tentative(
                Timings.quick(),
                tmp_path,
                registry={
                    "C": {"url": url, "key": keys["C"]},
                    "C2": {"url": url, "key": keys["C2"], "replica_of": "C.C"},
                },
                during_failure=lambda: admin._call("GET", "/v1/replicas"),
            )
            assert report["checks"]["output_matches_reference"], report["difference"]
            during = report["seen_during_failure"]
            assert [(r["host"], r["state"]) for r in during] == [("C2", "UP_FAILURE")]
            # The reporter sends every 200 ms: the reconciled state arrives shortly after.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                after = admin._call("GET", "/v1/replicas")
                if after[0]["reported_state"] == "STABLE":
                    break
                time.sleep(0.1)
            assert after[0]["reported_state"] == "STABLE"
        finally:
            for client in (admin, owner, host):
                client.close()
