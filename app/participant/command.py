"""``fedload agent``: run one participant's agent as its own process.

In this mode the agent decides and trades over REST with its private cost model, measuring load
as the tasks' loads recorded in the registry; moves it receives are committed in the registry
without carrying Spark state. Hosting real fragments across processes needs the source to release
its checkpoint on request, which the one-process demo does directly and this mode does not yet.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import typer

from app.participant.bpm_decisions import BpmDecisions
from app.participant.client import FedloadClient
from app.participant.node import Agent, MoveEvent


class RegistryLoads:
    """Load of each hosted task as the registry records it (declared, or sold in an offer)."""

    def __init__(self, client: FedloadClient) -> None:
        self._client = client

    def loads(self, tasks: list[str]) -> dict[str, float]:
        recorded = {t["name"]: float(t["load"]) for t in self._client.tasks()}
        return {t: recorded.get(t, 0.0) for t in tasks}


class RegistryOnlyMover:
    """Takes over tasks that carry no Spark state: committing the movement is the whole move."""

    def __init__(self, client: FedloadClient) -> None:
        self._client = client

    def receive(self, task: str, source: str, target: str, movement_id: int, epoch: int) -> None:
        self._client.commit(movement_id, epoch)

    def receive_replica(
        self, task: str, source: str, target: str, movement_id: int, epoch: int
    ) -> None:
        # No standby runs in this mode: the registry's record of the replica is all that moves.
        self._client.commit(movement_id, epoch)


def agent(
    participant: str = typer.Option(..., "--participant", help="The participant this agent runs."),
    api: str = typer.Option("http://127.0.0.1:8000", "--api", help="Base URL of the service."),
    key: str = typer.Option(
        ..., "--key", envvar="FEDLOAD_API_KEY", help="The participant's API key."
    ),
    cost_model: str = typer.Option(
        '{"kind": "mm1"}', "--cost-model", help="Private cost model as JSON, or @FILE."
    ),
    interval: float = typer.Option(1.0, help="Seconds between statistics (Borealis: 1 s)."),
    offer_interval: float = typer.Option(7.0, help="Seconds between offers (Borealis: 7 s)."),
    hysteresis: float = typer.Option(0.01, help="Price band against flip-flop moves."),
    ticks: int = typer.Option(0, help="Stop after this many intervals (0: run until stopped)."),
) -> None:
    """Run one participant: heartbeat, answer offers, and shed load when a partner is cheaper."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spec = json.loads(
        Path(cost_model[1:]).read_text() if cost_model.startswith("@") else cost_model
    )
    client = FedloadClient(api, key)
    me = client.me()
    if me["name"] != participant:
        raise typer.BadParameter(
            f"the key belongs to {me['name']!r}, not {participant!r}", param_hint="--key"
        )
    decisions = BpmDecisions.for_model(spec, me["capacity"], hysteresis)

    def report(move: MoveEvent) -> None:
        typer.echo(f"took {move.task} from {move.src} at {move.price}")

    runner = Agent(
        participant,
        client,
        decisions,
        RegistryLoads(client),
        RegistryOnlyMover(client),
        offer_interval=offer_interval,
        on_move=report,
    )
    started, tick = time.monotonic(), 0
    try:
        while ticks == 0 or tick < ticks:
            liveness = {p["name"]: p["liveness"] for p in client._call("GET", "/v1/participants")}
            runner.tick(time.monotonic() - started, liveness=liveness)
            tick += 1
            time.sleep(interval)
    finally:
        client.close()
