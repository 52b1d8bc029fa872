"""Separate hosts without extra machines: the service and each agent in a network namespace of
its own, with its own address on a bridge. 127.0.0.1 inside a namespace is that namespace's
alone, so a process that assumed loopback for a partner would fail here; the move passes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.integration.hosts.moves import move_o_x_from_s_to_t, placed_federation
from tests.support.netns import Hosts, separate_hosts

# Three agents' JVMs start at once: minutes on a quiet machine, up to fifteen on a loaded one.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]

# A host of its own has every port free: fixed ones, so a restarted agent keeps its endpoint.
SERVICE_PORT, AGENT_PORT = 8000, 7001


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    with separate_hosts() as made:
        for name in ("service", "O", "S", "T"):
            made.add(name)
        yield made


def test_loopback_in_one_host_does_not_reach_another(hosts: Hosts) -> None:
    probe = (
        "import socket,sys; s=socket.socket(); s.settimeout(3); "
        "sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))"
    )
    listener = "import socket,time; s=socket.create_server(('0.0.0.0', 7999)); time.sleep(30)"
    server = subprocess.Popen(
        ["ip", "netns", "exec", hosts.namespaces["O"], sys.executable, "-c", listener]
    )
    try:
        time.sleep(1.0)
        to_address = hosts.run("S", sys.executable, "-c", probe, hosts.addresses["O"], "7999")
        to_loopback = hosts.run("S", sys.executable, "-c", probe, "127.0.0.1", "7999")
    finally:
        server.kill()
        server.wait()
    assert to_address.returncode == 0, "S cannot reach O at O's address"
    assert to_loopback.returncode != 0, "S's loopback reached a port only O listens on"


def test_a_stateful_fragment_moves_between_agents_on_separate_hosts(
    hosts: Hosts, tmp_path, spark
) -> None:
    with placed_federation(
        tmp_path / "federation",
        service=hosts.placement("service", SERVICE_PORT),
        agents={name: hosts.placement(name, AGENT_PORT) for name in ("O", "S", "T")},
    ) as fed:
        assert fed.url == f"http://{hosts.addresses['service']}:{SERVICE_PORT}"
        move_o_x_from_s_to_t(fed, spark)
        admin = fed.admin()
        # Every endpoint the registry hands out is the agent's own address, none loopback.
        for name in ("O", "S", "T"):
            assert admin.endpoint(name) == f"grpc://{hosts.addresses[name]}:{AGENT_PORT}"
        assert fed.stop_agents(("S", "T", "O"), timeout=60) == [0, 0, 0]
