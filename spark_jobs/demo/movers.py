"""How a task changes host in the demo.

Real fragments go through the one movement path (``relocate``: stop after the last committed
batch, ship the checkpoint over Flight, restore, commit in the registry, resume). Tasks that are
only declared load have no state to carry, so the new host commits the registry movement alone.
In this one-process demo the target can reach the source's runtime directly; separate agent
processes would need the source to release the checkpoint on request (not built yet).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.agent.client import FedloadClient
from app.agent.coordinator import RegistryCoordinator
from spark_jobs.runtime import FragmentRuntime, FragmentSpec, LiveHost, relocate


class DemoMover:
    def __init__(
        self,
        clients: Mapping[str, FedloadClient],
        runtimes: Mapping[str, FragmentRuntime],
        real: Mapping[str, FragmentSpec],
    ) -> None:
        self._clients = clients
        self._runtimes = runtimes
        self._real = real
        self.timings: list[dict[str, float]] = []

    def receive(self, task: str, source: str, target: str, movement_id: int, epoch: int) -> None:
        spec = self._real.get(task)
        if spec is None:
            self._clients[target].commit(movement_id, epoch)
            return
        coordinator = RegistryCoordinator({target: self._clients[target]})
        moved = relocate(
            spec, LiveHost(self._runtimes[source]), self._runtimes[target], coordinator=coordinator
        )
        self.timings.append(moved.timings)
