"""Separate hosts on one machine: a Linux network namespace per process, joined by a bridge.

Each host gets its own namespace (its own loopback, ports and routing), a veth pair whose other
end sits on a bridge in the test's namespace, and its own address on a /24 drawn per run. A
process that connects to 127.0.0.1 reaches only its own namespace, so any loopback assumption
between the service and the agents fails loudly. The test's own process reaches every host over
the bridge (it holds the subnet's first address).

Everything is made by the test as root and removed afterwards, even when the test fails; names
carry a per-run tag so parallel runs never meet.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from spark_jobs.scenarios.processes import Placement
from tests.support.components import require


def netns_problem() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root (the test makes veth pairs and a bridge)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed: apt-get install iproute2"
    tag = f"flp{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", tag], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()} (no CAP_SYS_ADMIN/CAP_NET_ADMIN?)"
    subprocess.run(["ip", "netns", "del", tag], capture_output=True)
    return None


def require_netns() -> None:
    require("network namespaces (root and iproute2)", netns_problem())


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _subnets_in_use() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    return [ipaddress.IPv4Interface(line.split()[3]).network for line in out.splitlines()]


def _free_subnet() -> ipaddress.IPv4Network:
    used = _subnets_in_use()
    for _ in range(100):
        candidate = ipaddress.IPv4Network(
            f"10.{secrets.randbelow(200) + 50}.{secrets.randbelow(250) + 1}.0/24"
        )
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise RuntimeError("no free 10.x.y.0/24 for the test's hosts")


@dataclass
class Hosts:
    """The hosts made so far: name -> (namespace, address)."""

    tag: str
    subnet: ipaddress.IPv4Network
    bridge: str
    namespaces: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    _veths: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        """The test process's own address on the bridge."""
        return str(self.subnet.network_address + 1)

    def add(self, name: str) -> str:
        """A new host: its namespace, veth pair and address (returned)."""
        index = len(self.namespaces)
        namespace = f"{self.tag}-{name}"
        outside, inside = f"{self.tag}h{index}", f"{self.tag}n{index}"
        address = str(self.subnet.network_address + 2 + index)
        _ip("netns", "add", namespace)
        self.namespaces[name] = namespace
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        self._veths.append(outside)
        _ip("link", "set", inside, "netns", namespace)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        # A host's own loopback: Spark's driver talks to its Python workers over it.
        _ip("-n", namespace, "link", "set", "lo", "up")
        self.addresses[name] = address
        return address

    def placement(self, name: str, port: int, args: tuple[str, ...] = ()) -> Placement:
        return Placement(
            address=self.addresses[name],
            prefix=("ip", "netns", "exec", self.namespaces[name]),
            port=port,
            args=args,
        )

    def run(self, name: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a command on one host (a check from inside it)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.namespaces[name], *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def remove(self) -> list[str]:
        """Delete every namespace, veth and the bridge; returns what could not be removed."""
        left = []
        for namespace in self.namespaces.values():
            _stop_what_runs_in(namespace)
            if subprocess.run(["ip", "netns", "del", namespace], capture_output=True).returncode:
                left.append(namespace)
        for veth in self._veths:  # gone with its namespace's end unless the move failed
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
        if subprocess.run(["ip", "link", "del", self.bridge], capture_output=True).returncode:
            left.append(self.bridge)
        return left


def _pids_in(namespace: str) -> list[int]:
    found = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def _stop_what_runs_in(namespace: str, grace_s: float = 30.0) -> None:
    """A namespace outlives its deletion while a process runs in it. The test stopped its
    processes; their children (a Spark JVM, PySpark's workers) may take a while to follow,
    and whatever is still there after the grace period is this run's own and is killed."""
    deadline = time.monotonic() + grace_s
    while _pids_in(namespace) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in _pids_in(namespace):
        print(f"killing pid {pid}, still running in {namespace} after {grace_s:.0f} s")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def separate_hosts() -> Iterator[Hosts]:
    """A bridge with the test's address on it; ``add`` hosts to it. All of it is removed on
    exit, whatever happened (stop the processes in the namespaces first)."""
    require_netns()
    tag = f"fl{secrets.token_hex(3)}"  # interface names: 15 characters at most
    subnet = _free_subnet()
    hosts = Hosts(tag, subnet, bridge=f"{tag}br")
    try:
        _ip("link", "add", hosts.bridge, "type", "bridge")
        _ip("addr", "add", f"{hosts.gateway}/{subnet.prefixlen}", "dev", hosts.bridge)
        _ip("link", "set", hosts.bridge, "up")
        yield hosts
    finally:
        left = hosts.remove()
        if left:
            raise RuntimeError(f"network namespaces left behind: {left}")
