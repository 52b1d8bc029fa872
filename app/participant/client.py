"""A typed REST client for one participant (or the admin), used by agents, the demo and scripts.

Errors come back as ``ApiError`` carrying the service's ``detail`` and ``field``, so an agent can
tell a lost race (409) from a bug (422).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

# Items per page when a list is read whole: the service's maximum, fewest round trips.
PAGE_SIZE = 500
# Attempts of a blind write that lost an optimistic-lock race to an unrelated request.
STALE_RETRIES = 4


class ApiError(RuntimeError):
    def __init__(self, status: int, detail: str, field: str | None) -> None:
        super().__init__(f"HTTP {status}: {detail}" + (f" (field {field})" if field else ""))
        self.status, self.detail, self.field = status, detail, field


def _body(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text, "field": None}
        raise ApiError(response.status_code, str(body.get("detail")), body.get("field"))
    return response.json()


@dataclass
class FedloadClient:
    base_url: str
    api_key: str
    timeout: float = 10.0
    transport: httpx.BaseTransport | None = None

    def __post_init__(self) -> None:
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=self.timeout,
            transport=self.transport,
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, json: Any = None, params: Any = None) -> Any:
        return _body(self._http.request(method, path, json=json, params=params))

    def _list(self, path: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every item of a paginated list: the service answers a page at a time and names the
        next one in ``Link: <...>; rel="next"`` (``app/pagination.py``)."""
        items: list[dict[str, Any]] = []
        url: str = path
        query: dict[str, Any] | None = {**(params or {}), "limit": PAGE_SIZE}
        while True:
            response = self._http.get(url, params=query)
            items.extend(_body(response))
            following = response.links.get("next")
            if following is None:
                return items
            url, query = following["url"], None  # the link carries limit, filters and cursor

    # participants
    def me(self) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/participants/me"))

    def endpoint(self, participant: str) -> str | None:
        """A partner's data-plane address, as its agent last reported it (None: not yet)."""
        path = f"/v1/participants/{quote(participant, safe='')}/endpoint"
        found = self._call("GET", path).get("endpoint")
        return None if found is None else str(found)

    def dataplane_token(self, grant: dict[str, Any]) -> dict[str, Any]:
        """A token for a Flight call: ``grant`` as ``Grant.to_json`` (ops, stream or task and
        movement, consumer); {"token", "serving", "expires_at"}."""
        body = {"operations": grant["ops"]}
        body.update({k: grant[k] for k in ("stream", "task", "movement", "consumer") if k in grant})
        return dict(self._call("POST", "/v1/dataplane/tokens", json=body))

    def dataplane_keys(self) -> list[str]:
        """The service's public keys (PEM) that verify data-plane tokens."""
        return [str(k) for k in self._call("GET", "/v1/dataplane/key")["public_keys"]]

    def heartbeat(self, **report: Any) -> dict[str, Any]:
        return dict(self._call("POST", "/v1/participants/me/heartbeat", json=report))

    def rejoin(self) -> dict[str, Any]:
        """End this participant's fence after a declared failure (drop what ran here first)."""
        return dict(self._call("POST", "/v1/participants/me/rejoin"))

    # contracts
    def contracts(self, status: str | None = None) -> list[dict[str, Any]]:
        return self._list("/v1/contracts", {"status": status} if status else None)

    # tasks
    def tasks(self) -> list[dict[str, Any]]:
        return self._list("/v1/tasks")

    def task(self, name: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/tasks/{quote(name, safe='')}"))

    def set_task_load(self, name: str, load: float) -> dict[str, Any]:
        """The owner (or an admin) declares a task's new load: its input rate changed."""
        return dict(self._call("PATCH", f"/v1/tasks/{quote(name, safe='')}", json={"load": load}))

    def report_analysis(
        self, task: str, *, error: str | None, output_schema: str | None
    ) -> dict[str, Any]:
        """The owner's agent reports Spark's analysis of a task's work: what it refused
        (None clears it) and the output schema it found (None keeps the recorded one)."""
        body = {"error": error, "output_schema": output_schema}
        return dict(self._call("PUT", f"/v1/tasks/{quote(task, safe='')}/analysis", json=body))

    def lease(self, task: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/tasks/{task}/lease"))

    def replicas(self) -> list[dict[str, Any]]:
        return self._list("/v1/replicas")

    def report_replica_state(self, task: str, state: str) -> dict[str, Any]:
        """This participant's replica of ``task`` is in DPC state ``state``.

        A report is the holder's own state, written blind (no version read first): a 409 for a
        concurrent change says another request touched a row the report also writes (the
        owner's balance, when two holders are paid at once: every few seconds with two active
        copies), so the report is sent again, a few times, before the error is the caller's."""
        path = f"/v1/replicas/{quote(task, safe='')}/state"
        for attempt in range(STALE_RETRIES):
            try:
                return dict(self._call("PUT", path, json={"state": state}))
            except ApiError as error:
                if not (error.status == 409 and error.field == "version"):
                    raise
                if attempt == STALE_RETRIES - 1:
                    raise
                # Apart: two holders that collided once would collide again in step.
                time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
        raise AssertionError("unreachable")

    # reconciliation permits (the registry's arbiter)
    def request_permit(self, fragment: str, replica: str) -> dict[str, Any]:
        path = f"/v1/permits/{quote(fragment, safe='')}/request"
        return dict(self._call("POST", path, json={"replica": replica}))

    def release_permit(self, fragment: str, replica: str) -> dict[str, Any]:
        path = f"/v1/permits/{quote(fragment, safe='')}/release"
        return dict(self._call("POST", path, json={"replica": replica}))

    def permits(self) -> list[dict[str, Any]]:
        return self._list("/v1/permits")

    # offers
    def offer(
        self,
        contract_id: int,
        tasks: list[str],
        price: float,
        loads: dict[str, float] | None = None,
        relay_for: int | None = None,
        replicas: list[str] | None = None,
        reservation_price: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"contract_id": contract_id, "tasks": tasks, "price": price}
        if reservation_price is not None:
            body["reservation_price"] = reservation_price
        if replicas:
            body["replicas"] = replicas
        if loads is not None:
            body["loads"] = loads
        if relay_for is not None:
            body["relay_for"] = relay_for
        return dict(self._call("POST", "/v1/offers", json=body))

    def offers(self, status: str | None = None) -> list[dict[str, Any]]:
        return self._list("/v1/offers", {"status": status} if status else None)

    def accept(
        self,
        offer_id: int,
        version: int,
        tasks: list[str] | None = None,
        replicas: list[str] | None = None,
        reservation_price: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"version": version}
        if reservation_price is not None:
            body["reservation_price"] = reservation_price
        if tasks is not None:
            body["tasks"] = tasks
        if replicas is not None:
            body["replicas"] = replicas
        return dict(self._call("POST", f"/v1/offers/{offer_id}/accept", json=body))

    def reject(self, offer_id: int, version: int) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/offers/{offer_id}/reject", json={"version": version}))

    def withdraw(self, offer_id: int, version: int) -> dict[str, Any]:
        return dict(
            self._call("POST", f"/v1/offers/{offer_id}/withdraw", json={"version": version})
        )

    # movements
    def movement(self, movement_id: int) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/movements/{int(movement_id)}"))

    def movements(self) -> list[dict[str, Any]]:
        """Movements from or to this participant, newest first."""
        return self._list("/v1/movements")

    # participants
    def participants(self) -> list[dict[str, Any]]:
        """Every participant's public profile and liveness."""
        return self._list("/v1/participants")

    def request_movement(self, task: str, to: str, reason: str) -> dict[str, Any]:
        return dict(
            self._call("POST", "/v1/movements", json={"task": task, "to": to, "reason": reason})
        )

    def commit(self, movement_id: int, epoch: int) -> dict[str, Any]:
        return dict(
            self._call("POST", f"/v1/movements/{movement_id}/commit", json={"epoch": epoch})
        )

    def abort(self, movement_id: int) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/movements/{movement_id}/abort"))
