"""Helpers for tests that run the service and agents as real processes (move-federation.yaml)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.federation.document import load_federation
from app.participant.client import FedloadClient
from spark_jobs.runtime.dataplane import client_defaults, use_client_defaults
from spark_jobs.scenarios.processes import AgentSettings, ProcessFederation
from tests.support.certificates import Issued

FEDERATION = Path(__file__).with_name("move-federation.yaml")
GENERATOR = {"seed": 11, "rate": 60}
# Short enough that a crash test waits seconds, long beside a move on a loaded machine
# (3 s when quiet, 6-10 s seen under a load of 10), and beside a warm hand-off (the crash
# tests' "warmed" case) that gives up after its budget and moves by stop-and-copy then.
LEASE_SECONDS = 20.0
# O runs the generator (a Python publisher) and keeps the logs: no Spark query, unless O.x moves
# back to it. Its agent starts Spark only then (``--spark-eager`` off): an idle JVM of its own
# would take one of the two cores from S's and T's while they start and move O.x.
SPARKLESS = frozenset({"O"})


def eager(name: str) -> bool:
    """Whether ``name``'s agent starts Spark at once (see ``SPARKLESS``)."""
    return name not in SPARKLESS


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 120.0, every: float = 0.5
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as error:  # the service may be restarting: keep asking
            last = error
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


@contextmanager
def federation(
    work: Path,
    database_url: str | None = None,
    *,
    agent_args: tuple[str, ...] = (),
    lease_seconds: float = LEASE_SECONDS,
) -> Iterator[ProcessFederation]:
    """``agent_args``: more ``fedload agent`` flags for every agent (``--tls-cert ...``)."""
    fed = ProcessFederation(
        load_federation(FEDERATION),
        work,
        database_url=database_url,
        lease_seconds=lease_seconds,
        agent_settings=AgentSettings(
            offer_interval=2.0, spark_eager=True, hysteresis=0.005, extra_args=agent_args
        ),
    )
    try:
        fed.start()
        yield fed
    except BaseException:
        for name, agent in fed.agents.items():
            print(f"--- {name}'s agent log ---\n{agent.tail(40)}")
        raise
    finally:
        fed.close()


def tls_flags(issued: Issued) -> tuple[str, ...]:
    """``fedload agent`` flags serving ``grpc+tls://`` with ``issued``'s certificate and
    trusting its authority for partners' endpoints."""
    return (
        "--tls-cert",
        str(issued.cert),
        "--tls-key",
        str(issued.key),
        "--tls-ca",
        str(issued.ca),
    )


@contextmanager
def trusting(ca: Path | None) -> Iterator[None]:
    """This test process's data-plane clients (output checks, outsider probes, the reference
    comparison's live read) trust ``ca`` for ``grpc+tls://`` endpoints while the block runs,
    as an agent started with ``--tls-ca`` does; None: nothing changes."""
    before = client_defaults()
    if ca is not None:
        use_client_defaults(replace(before, tls_roots=ca.read_bytes(), tls_roots_file=str(ca)))
    try:
        yield
    finally:
        use_client_defaults(before)


def host_of(admin: FedloadClient, task: str) -> str:
    return str(admin.task(task)["host"])


def output_rows(admin: FedloadClient, task: str) -> int:
    info = _info(admin, task)
    return int(info["rows"])


def _info(admin: FedloadClient, task: str) -> dict[str, Any]:
    from spark_jobs.runtime.dataplane import registry_tokens
    from spark_jobs.runtime.transport import StreamClient

    owner = admin.task(task)["owner"]
    location = admin.endpoint(owner)
    assert location is not None
    # The operator reads outputs with a read token the registry issues to the admin key.
    with StreamClient(location, tokens=registry_tokens(admin)) as client:
        return client.info(f"{task}.out")


def overload_s(admin: FedloadClient) -> None:
    """S.base grows past S's threshold with O.x on top: S must shed O.x, its only movable task.
    O sits near its own threshold, so T (empty) is the partner with room."""
    admin._call("PATCH", "/v1/tasks/S.base", json={"load": 78, "pinned": True})


def movements(admin: FedloadClient) -> list[dict[str, Any]]:
    return admin.movements()


def pause_at(fed_data_dir: Path, step: str, timeout: float = 180.0) -> None:
    """Wait until the agent whose data directory this is paused at ``step`` of a move
    (started with FEDLOAD_FAULT_PAUSE=step)."""
    wait_for(f"a pause at {step}", lambda: (fed_data_dir / f"paused-{step}").exists(), timeout)


def resume(fed_data_dir: Path, step: str) -> None:
    (fed_data_dir / f"resume-{step}").write_text("go")


def latest_movement(admin: FedloadClient, task: str) -> dict[str, Any]:
    return max((m for m in admin.movements() if m["task"] == task), key=lambda m: m["id"])


def grows(admin: FedloadClient, task: str, by: int = 20, timeout: float = 120.0) -> None:
    """The task's output log keeps growing: some host runs it and writes to its owner's log."""
    before = output_rows(admin, task)
    wait_for(f"{task}'s output to grow", lambda: output_rows(admin, task) >= before + by, timeout)
