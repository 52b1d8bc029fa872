"""How a task changes host in the demo.

Real fragments go through the one movement path (``relocate``: stop after the last committed
batch, ship the checkpoint over Flight, restore, commit in the registry, resume). Tasks that are
only declared load have no state to carry, so the new host commits the registry movement alone.
A replica follows the same rule: where a passive standby keeps a real fragment's checkpoint at
the replica's host (``spark_jobs.runtime.standby``), the standby moves first (latest checkpoint
shipped to the new host, then the commit, then the old copy dropped); any other replica is a
registry record and moves by commit alone. The demo's federation gives no real fragment a
replica, so no standby runs there today. In this one-process demo the target can reach the
source's runtime directly; separate agent processes would need the source to release the
checkpoint on request (not built yet).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from app.participant.client import FedloadClient
from spark_jobs.runtime import FragmentRuntime, FragmentSpec, LiveHost, relocate
from spark_jobs.runtime.registry_coordinator import RegistryCoordinator
from spark_jobs.runtime.standby import StandbyKeeper


class DemoMover:
    def __init__(
        self,
        clients: Mapping[str, FedloadClient],
        runtimes: Mapping[str, FragmentRuntime],
        real: Mapping[str, FragmentSpec],
        standbys: MutableMapping[str, StandbyKeeper] | None = None,
    ) -> None:
        self._clients = clients
        self._runtimes = runtimes
        self._real = real
        # task -> the keeper of its passive standby, for real fragments that have a replica.
        self.standbys: MutableMapping[str, StandbyKeeper] = standbys if standbys is not None else {}
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

    def receive_replica(
        self, task: str, source: str, target: str, movement_id: int, epoch: int
    ) -> None:
        keeper = self.standbys.get(task)
        if keeper is None:
            self._clients[target].commit(movement_id, epoch)
            return
        if keeper.replica.name != source:
            self._clients[target].abort(movement_id)
            raise RuntimeError(f"the standby of {task} is on {keeper.replica.name}, not {source}")
        # The accepted offer prepared the movement; the coordinator adopts it by its source.
        coordinator = RegistryCoordinator({target: self._clients[target]})
        keeper.move(self._runtimes[target], coordinator, record=task)
