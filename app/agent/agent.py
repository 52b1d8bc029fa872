"""One participant's control loop, talking to the registry over REST.

Every statistics interval the agent measures its load, heartbeats it, and answers offers that
are addressed to it (accepting the subset its cost model can take at the offered price, then
performing those moves). Every offer interval, with no offer outstanding and no move in flight,
it asks its decisions whether to shed load and to whom. Borealis's constants are the defaults:
statistics every 1 s, offers every 7 s (Balazinska et al., NSDI 2004).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from app.agent.client import ApiError, FedloadClient
from app.agent.decisions import ContractView, Decisions

log = logging.getLogger("fedload.agent")


class LoadMeter(Protocol):
    def loads(self, tasks: list[str]) -> dict[str, float]:
        """Current load (load units) of each hosted task."""
        ...


class Mover(Protocol):
    def receive(self, task: str, source: str, target: str, movement_id: int, epoch: int) -> None:
        """Bring ``task`` over from ``source`` and commit the movement as its new host."""
        ...


@dataclass(frozen=True)
class MoveEvent:
    at: float
    task: str
    src: str
    dst: str
    price: float | None
    reason: str
    movement_id: int


@dataclass
class AgentState:
    load: float = 0.0
    marginal_cost: float = 0.0
    threshold: float = 0.0
    hosted: dict[str, float] = field(default_factory=dict)
    last_offer_at: float = float("-inf")
    last_offer: tuple[int, str] | None = None  # (offer id, partner) of the latest offer made
    refused_at: dict[str, float] = field(default_factory=dict)  # partner -> when it last refused
    errors: list[str] = field(default_factory=list)


class Agent:
    def __init__(
        self,
        name: str,
        client: FedloadClient,
        decisions: Decisions,
        meter: LoadMeter,
        mover: Mover,
        *,
        offer_interval: float = 7.0,
        refusal_backoff_intervals: int = 3,
        on_move: Callable[[MoveEvent], None] | None = None,
    ) -> None:
        self.name = name
        self.client = client
        self.decisions = decisions
        self.meter = meter
        self.mover = mover
        self.offer_interval = offer_interval
        self.refusal_backoff = refusal_backoff_intervals * offer_interval
        self.on_move = on_move
        self.state = AgentState()

    def contracts(self) -> list[ContractView]:
        out = []
        for c in self.client.contracts(status="active"):
            partner = c["partner"] if c["proposer"] == self.name else c["proposer"]
            out.append(
                ContractView(
                    c["id"], partner, c["price_min"], c["price_max"], c["min_move_seconds"]
                )
            )
        return out

    def tick(self, now: float, *, liveness: Mapping[str, str]) -> None:
        """One statistics interval at simulated time ``now`` (seconds)."""
        tasks = [t for t in self.client.tasks() if t["host"] == self.name]
        loads = self.meter.loads([t["name"] for t in tasks])
        contracts = self.contracts()
        state = self.state
        state.hosted = loads
        state.load = sum(loads.values())
        state.marginal_cost = self.decisions.marginal_cost(state.load)
        state.threshold = self.decisions.threshold(contracts)
        self.client.heartbeat(
            load=state.load, marginal_cost=_finite(state.marginal_cost), threshold=state.threshold
        )
        self._answer_offers(now, loads)
        if now - state.last_offer_at >= self.offer_interval:
            state.last_offer_at = now
            self._maybe_offer(now, tasks, loads, contracts, liveness)

    def _answer_offers(self, now: float, loads: dict[str, float]) -> None:
        for offer in self.client.offers(status="open"):
            if offer["to"] != self.name:
                continue
            offered = self._offered_loads(offer)
            chosen = self.decisions.choose_accepted(
                load=sum(loads.values()), offered=offered, price=offer["price"]
            )
            try:
                if not chosen:
                    self.client.reject(offer["id"], offer["version"])
                    continue
                accepted = self.client.accept(offer["id"], offer["version"], chosen)
            except ApiError as exc:
                self.state.errors.append(f"offer {offer['id']}: {exc.detail}")
                continue
            self._perform(now, accepted)
            loads = {**loads, **{t: offered[t] for t in chosen}}

    def _offered_loads(self, offer: dict) -> dict[str, float]:
        # The offer names tasks; their declared loads are what the giver measured and sells.
        return {t: float(offer["loads"].get(t, 0.0)) for t in offer["tasks"]}

    def _perform(self, now: float, accepted: dict) -> None:
        movements = {m["id"]: m for m in self.client.movements()}
        for movement_id in accepted["movement_ids"]:
            m = movements[movement_id]
            try:
                self.mover.receive(m["task"], m["from"], self.name, movement_id, m["epoch"])
            except Exception as exc:  # the move is aborted by the mover; keep the agent alive
                log.warning("move of %s to %s failed: %s", m["task"], self.name, exc)
                self.state.errors.append(f"move {m['task']}: {exc}")
                continue
            if self.on_move is not None:
                self.on_move(
                    MoveEvent(
                        now, m["task"], m["from"], self.name, m["price"], m["reason"], movement_id
                    )
                )

    def _maybe_offer(
        self,
        now: float,
        tasks: list[dict],
        loads: dict[str, float],
        contracts: list[ContractView],
        liveness: Mapping[str, str],
    ) -> None:
        mine = [o for o in self.client.offers() if o["from"] == self.name]
        if any(o["status"] == "open" for o in mine):
            return
        self._note_refusal(now, mine)
        available = {
            partner: status == "online"
            and now - self.state.refused_at.get(partner, float("-inf")) >= self.refusal_backoff
            for partner, status in liveness.items()
        }
        movable = {t["name"]: loads[t["name"]] for t in tasks if not t["pinned"]}
        plan = self.decisions.plan_offer(
            load=sum(loads.values()),
            movable=movable,
            contracts=contracts,
            partner_online=available,
        )
        if plan is None:
            return
        try:
            made = self.client.offer(
                plan.contract_id, list(plan.tasks), plan.price, {t: movable[t] for t in plan.tasks}
            )
        except ApiError as exc:
            self.state.errors.append(f"offer to {plan.partner}: {exc.detail}")
            return
        self.state.last_offer = (int(made["id"]), plan.partner)

    def _note_refusal(self, now: float, mine: list[dict]) -> None:
        # Prices are often equal across contracts, so "cheapest partner first" would name the
        # same partner forever; a partner that refused (or took only part) is skipped for a few
        # offer intervals so the giver tries the next one, as Borealis's A sheds to B, then to C.
        if self.state.last_offer is None:
            return
        offer_id, partner = self.state.last_offer
        last = next((o for o in mine if o["id"] == offer_id), None)
        if last is not None and last["status"] in ("rejected", "partially_accepted", "expired"):
            self.state.refused_at[partner] = now
        self.state.last_offer = None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
