"""A node's reports to the registry: participant heartbeats carrying the DPC node state, and,
for a replica, its state on the replica record, so an admin sees it in ``GET /v1/replicas``.

Runs in its own thread: the registry is a remote service and must never slow the data path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from app.participant.client import FedloadClient


class RegistryReporter:
    def __init__(
        self,
        config: dict[str, Any],
        state: Callable[[], str | None],
        endpoint: str,
        *,
        interval: float = 0.2,
    ) -> None:
        self.client = FedloadClient(config["url"], config["key"])
        self.task: str | None = config.get("replica_of")
        # The replica epoch this host was given (``GET /v1/replicas``): with it, the registry
        # refuses this node's reports once the replica has moved on.
        self.replica_epoch: int | None = config.get("replica_epoch")
        self.state = state
        self.endpoint = endpoint
        self.interval = interval
        self.reported: str | None = None
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.client.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            state = self.state()
            try:
                self.client.heartbeat(endpoint=self.endpoint, node_state=state)
                if self.task is not None and state is not None and state != self.reported:
                    body: dict[str, Any] = {"state": state}
                    if self.replica_epoch is not None:
                        body["epoch"] = self.replica_epoch
                    self.client._call("PUT", f"/v1/replicas/{self.task}/state", json=body)
                    self.reported = state
            except Exception:
                # The registry being away is not the data path's problem; retry next time.
                self.failures += 1
