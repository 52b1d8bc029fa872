"""A seeded federation for the admin UI tests: the Borealis demo file, load samples and moves,
written through the real service (contracts file + REST API), never straight into tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.db.session import unit_of_work
from app.federation.apply import apply_federation
from app.federation.document import load_federation

DEMO_FILE = Path(__file__).resolve().parents[3] / "contracts" / "borealis-demo.yaml"


class HttpClient(Protocol):
    def get(self, url: str, **kwargs: Any) -> Any: ...
    def post(self, url: str, **kwargs: Any) -> Any: ...


def apply_demo(database_url: str) -> dict[str, str]:
    """Apply contracts/borealis-demo.yaml; return each participant's new API key."""
    with unit_of_work(database_url) as session:
        return apply_federation(session, load_federation(DEMO_FILE), actor="file:test").new_keys


@dataclass
class Federation:
    client: HttpClient
    admin_key: str
    keys: dict[str, str]

    def headers(self, who: str) -> dict[str, str]:
        key = self.admin_key if who == "admin" else self.keys[who]
        return {"Authorization": f"Bearer {key}"}

    def call(self, method: str, who: str, path: str, body: Any = None) -> Any:
        send = self.client.post if method == "post" else self.client.get
        kwargs: dict[str, Any] = {"headers": self.headers(who)}
        if body is not None:
            kwargs["json"] = body
        response = send(path, **kwargs)
        assert response.status_code < 300, f"{method} {path}: {response.text}"
        return response.json()

    def heartbeat(
        self,
        who: str,
        load: float,
        *,
        marginal_cost: float | None = None,
        threshold: float | None = None,
        node_state: str = "STABLE",
    ) -> None:
        self.call(
            "post",
            who,
            "/v1/participants/me/heartbeat",
            {
                "load": load,
                "marginal_cost": marginal_cost,
                "threshold": threshold,
                "node_state": node_state,
            },
        )

    def contract_between(self, a: str, b: str) -> dict[str, Any]:
        for contract in self.call("get", "admin", "/v1/contracts"):
            if {contract["proposer"], contract["partner"]} == {a, b}:
                return dict(contract)
        raise AssertionError(f"no contract between {a} and {b}")

    def load_move(self, task: str, src: str, dst: str, price: float = 0.25) -> dict[str, Any]:
        """A market move: src offers the task under their contract, dst accepts and commits."""
        contract = self.contract_between(src, dst)
        offer = self.call(
            "post",
            src,
            "/v1/offers",
            {"contract_id": contract["id"], "tasks": [task], "price": price},
        )
        accepted = self.call("post", dst, f"/v1/offers/{offer['id']}/accept", {"version": 1})
        (movement_id,) = accepted["movement_ids"]
        return dict(
            self.call(
                "post", dst, f"/v1/movements/{movement_id}/commit", {"epoch": _epoch(self, task)}
            )
        )


def _epoch(federation: Federation, task: str) -> int:
    lease = federation.call("get", "admin", f"/v1/tasks/{task}/lease")
    return int(lease["epoch"]) + 1
