"""A mover between fragment runtimes that share one process, for tests of the standby path.

Agent processes move fragments with ``spark_jobs.runtime.participant_host``; this composition
keeps the in-process case the replica tests need: real fragments through ``relocate`` from the
source's runtime, declared load by commit alone, a replica by moving its passive standby (latest
checkpoint shipped to the new host, then the commit, then the old copy dropped).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from app.participant.client import FedloadClient
from app.participant.ports import MovementRecord, Received
from spark_jobs.runtime import FragmentRuntime, FragmentSpec, LiveHost, relocate
from spark_jobs.runtime.registry_coordinator import RegistryCoordinator
from spark_jobs.runtime.standby import StandbyKeeper


class InProcessMover:
    """Moves between runtimes of one process (tests of the standby path): real fragments go
    through ``relocate`` from the source's runtime, declared load commits alone, a replica
    moves its passive standby."""

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

    def receive(self, movement: MovementRecord) -> Received:
        spec = self._real.get(movement.task)
        if spec is None:
            self._clients[movement.target].commit(movement.id, movement.epoch)
            return Received()
        coordinator = RegistryCoordinator({movement.target: self._clients[movement.target]})
        moved = relocate(
            spec,
            LiveHost(self._runtimes[movement.source]),
            self._runtimes[movement.target],
            coordinator=coordinator,
        )
        self.timings.append(moved.timings)
        return Received(moved.checkpoint_bytes, moved.timings)

    def receive_replica(self, movement: MovementRecord) -> Received:
        keeper = self.standbys.get(movement.task)
        target = movement.target
        if keeper is None:
            self._clients[target].commit(movement.id, movement.epoch)
            return Received()
        if keeper.replica.name != movement.source:
            self._clients[target].abort(movement.id)
            raise RuntimeError(
                f"the standby of {movement.task} is on {keeper.replica.name}, not {movement.source}"
            )
        # The accepted offer prepared the movement; the coordinator adopts it by its source.
        coordinator = RegistryCoordinator({target: self._clients[target]})
        keeper.move(self._runtimes[target], coordinator, record=movement.task)
        return Received()
