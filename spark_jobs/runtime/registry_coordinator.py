"""The registry as the fragment runtime's movement coordinator, over REST.

Implements ``spark_jobs.runtime.coordinator.MovementCoordinator`` structurally. Load moves are
prepared by accepting an offer (the market's path), so ``prepare`` for reason "load" adopts the
movement that acceptance created; other reasons (failover, replica switch, reconciliation)
prepare a movement directly. ``commit`` is sent with the receiving participant's key, since only
the new host may make itself the host of record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.participant.client import ApiError, FedloadClient
from app.participant.ports import MovementRecord
from spark_jobs.runtime.coordinator import MovementRefused, PreparedMove


def abort_once(client: FedloadClient, movement_id: int) -> None:
    """Abort a prepared movement; one already committed or aborted (409) is left as it is,
    since abort is idempotent by the coordinator's contract."""
    try:
        client.abort(movement_id)
    except ApiError as exc:
        if exc.status != 409:
            raise


class RegistryCoordinator:
    def __init__(self, clients: Mapping[str, FedloadClient]) -> None:
        # One client per participant this process acts for (one in an agent, all in the demo).
        self._clients = dict(clients)
        self._targets: dict[int, str] = {}

    def _client(self, participant: str) -> FedloadClient:
        try:
            return self._clients[participant]
        except KeyError as exc:
            raise MovementRefused(
                f"this process holds no key for participant {participant!r}"
            ) from exc

    def prepare(self, fragment: str, source: str, target: str, reason: str) -> PreparedMove:
        client = self._client(target)
        try:
            if reason == "load":
                found = [
                    m
                    for m in client.movements()
                    if m["task"] == fragment and m["status"] == "prepared" and m["to"] == target
                ]
                if not found:
                    raise MovementRefused(f"no accepted offer moves {fragment} to {target}")
                movement = found[0]
            else:
                movement = client.request_movement(fragment, target, reason)
        except ApiError as exc:
            raise MovementRefused(exc.detail) from exc
        if movement["from"] != source:
            raise MovementRefused(f"{fragment} is hosted by {movement['from']!r}, not {source!r}")
        self._targets[int(movement["id"])] = target
        return PreparedMove(
            int(movement["id"]), fragment, source, target, int(movement["epoch"]), reason
        )

    def commit(self, movement_id: int) -> int:
        target = self._targets.get(movement_id)
        if target is None:
            raise MovementRefused(f"movement {movement_id} was not prepared here")
        client = self._client(target)
        epoch = next((int(m["epoch"]) for m in client.movements() if m["id"] == movement_id), None)
        if epoch is None:
            raise MovementRefused(f"movement {movement_id} is not visible to {target}")
        try:
            return int(client.commit(movement_id, epoch)["epoch"])
        except ApiError as exc:
            raise MovementRefused(exc.detail) from exc

    def abort(self, movement_id: int, why: str) -> None:
        target = self._targets.get(movement_id)
        if target is None:
            return
        abort_once(self._client(target), movement_id)

    def current_epoch(self, fragment: str) -> int:
        return int(self._any_client_seeing(fragment).lease(fragment)["epoch"])

    def host(self, fragment: str) -> str:
        return str(self._any_client_seeing(fragment).lease(fragment)["host"])

    def _any_client_seeing(self, fragment: str) -> FedloadClient:
        for client in self._clients.values():
            try:
                client.lease(fragment)
                return client
            except ApiError:
                continue
        raise MovementRefused(f"no participant of this process can see task {fragment}")


class PreparedMovementCoordinator:
    """The registry's side of one movement it already prepared (an accepted offer).

    The receiving agent holds the movement as the registry created it (``GET /v1/movements/{id}``),
    so ``prepare`` only checks that it is the one being carried out; ``commit`` is sent with the
    receiver's key, the only one the registry takes a commit from."""

    def __init__(self, client: FedloadClient, movement: MovementRecord) -> None:
        self._client = client
        self._movement = movement

    def prepare(self, fragment: str, source: str, target: str, reason: str) -> PreparedMove:
        m = self._movement
        if (m.task, m.source, m.target) != (fragment, source, target):
            raise MovementRefused(
                f"movement {m.id} moves {m.task} from {m.source} to {m.target}, "
                f"not {fragment} from {source} to {target}"
            )
        if m.status != "prepared":
            raise MovementRefused(f"movement {m.id} is {m.status}, not prepared")
        return PreparedMove(m.id, m.task, m.source, m.target, m.epoch, m.reason)

    def commit(self, movement_id: int) -> int:
        try:
            return int(self._client.commit(movement_id, self._movement.epoch)["epoch"])
        except ApiError as exc:
            raise MovementRefused(exc.detail) from exc

    def abort(self, movement_id: int, why: str) -> None:
        abort_once(self._client, movement_id)

    def current_epoch(self, fragment: str) -> int:
        return int(self._lease(fragment).get("epoch", -1))

    def host(self, fragment: str) -> str:
        return str(self._lease(fragment).get("host", ""))

    def _lease(self, fragment: str) -> dict[str, Any]:
        try:
            return self._client.lease(fragment)
        except ApiError as exc:
            if exc.status == 404:
                # The registry hides a task from a participant that neither hosts it nor is
                # about to: after an aborted move that is the answer "not you".
                return {}
            raise
