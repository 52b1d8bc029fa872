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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.market import runnable
from app.market.protocol import MAX_RELAY_DEPTH, plan_room, take_after_room
from app.participant.client import ApiError
from app.participant.decisions import ContractView, Decisions
from app.participant.failover import Availability, kept, plan_failovers
from app.participant.ports import Host, MovementRecord, Mover, Registry, TaskRecord
from app.work.distributions import allowed_distributions, is_allowed

log = logging.getLogger("fedload.agent")


@dataclass(frozen=True)
class MoveEvent:
    at: float
    task: str
    src: str
    dst: str
    price: float | None
    reason: str
    movement_id: int
    state_bytes: int = 0  # bytes of Spark state shipped; 0 for a declared-load task
    timings: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingRelay:
    downstream_offer: int
    partner: str
    load_before: float


@dataclass
class AgentState:
    load: float = 0.0
    marginal_cost: float = 0.0
    threshold: float = 0.0
    hosted: dict[str, float] = field(default_factory=dict)
    # Replicas are load like the rest: the ones I host (by task name) and, for tasks I own,
    # who hosts their replicas (so I never offer a primary to one of them).
    replicas: set[str] = field(default_factory=set)
    held_by: dict[str, set[str]] = field(default_factory=dict)
    last_offer_at: float = float("-inf")
    last_offer: tuple[int, str] | None = None  # (offer id, partner) of the latest offer made
    refused_at: dict[str, float] = field(default_factory=dict)  # partner -> when it last refused
    # partner -> (smallest task load of an offer it refused outright, when): it had no room
    refused_size: dict[str, tuple[float, float]] = field(default_factory=dict)
    offered_at: dict[str, float] = field(default_factory=dict)  # partner -> when it last shed to me
    # partner -> {task: when}: the registry refused to offer it the task, a python fragment
    # from a distribution its agent does not run (app.market.runnable); offered elsewhere.
    cannot_run: dict[str, dict[str, float]] = field(default_factory=dict)
    # upstream offer id -> the room-making relay under way for it (protocol.plan_room)
    relays: dict[int, PendingRelay] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class Agent:
    def __init__(
        self,
        name: str,
        client: Registry,
        decisions: Decisions,
        host: Host,
        mover: Mover,
        *,
        offer_interval: float = 7.0,
        refusal_backoff_intervals: int = 3,
        on_move: Callable[[MoveEvent], None] | None = None,
        accept_fragments: Collection[str] | None = None,
        clock: Callable[[], datetime] | None = None,
        availability: Availability | None = None,
        fragments: Collection[str] | None = None,
    ) -> None:
        """``accept_fragments``: the catalogue fragments this participant agrees to run (None:
        any); offered tasks running another fragment are left out of what it accepts.
        ``clock``: the time the registry's timestamps (``host_since``) are compared with, UTC
        (default the wall clock; a simulation passes its simulated clock).
        ``availability``: the data plane of crash recovery (standbys kept, failovers made);
        None: this participant neither keeps replicas real nor fails tasks over.
        ``fragments``: the Python distributions its operator allows fragments from
        (``fedload agent --fragments``; fedload always), advertised in every heartbeat; offered
        Python tasks from any other are left out. None: no Python fragments are checked (a
        node whose host runs none)."""
        self.name = name
        self.client = client
        self.decisions = decisions
        self.host = host
        self.mover = mover
        self.offer_interval = offer_interval
        self.refusal_backoff = refusal_backoff_intervals * offer_interval
        self.on_move = on_move
        self.accept_fragments = None if accept_fragments is None else frozenset(accept_fragments)
        self.fragments = None if fragments is None else allowed_distributions(fragments)
        self.clock = clock or _wall_clock
        self.availability = availability
        self.state = AgentState()

    def contracts(self) -> list[ContractView]:
        out = []
        for c in self.client.contracts(status="active"):
            partner = c["partner"] if c["proposer"] == self.name else c["proposer"]
            out.append(
                ContractView(
                    c["id"],
                    partner,
                    c["price_min"],
                    c["price_max"],
                    c["min_move_seconds"],
                    bool((c.get("availability") or {}).get("replica_hosting", False)),
                )
            )
        return out

    def tick(self, now: float, *, liveness: Mapping[str, str]) -> None:
        """One statistics interval at simulated time ``now`` (seconds)."""
        visible = self.client.tasks()
        # The host runs what the registry says this participant hosts (and serves the output
        # logs of what it owns) before anything is measured or traded.
        self.host.reconcile([TaskRecord.from_read(t) for t in visible])
        tasks = [t for t in visible if t["host"] == self.name]
        loads = self.host.loads([TaskRecord.from_read(t) for t in tasks])
        state = self.state
        state.replicas, state.held_by = set(), {}
        replica_rows = self.client.replicas()
        for r in replica_rows:
            if r["host"] == self.name:
                state.replicas.add(r["task"])
                loads[r["task"]] = float(r["load"])  # as the registry records it: what was sold
            else:
                state.held_by.setdefault(r["host"], set()).add(r["task"])
        contracts = self.contracts()
        state.hosted = loads
        state.load = sum(loads.values())
        state.marginal_cost = self.decisions.marginal_cost(state.load)
        state.threshold = self.decisions.threshold(contracts)
        beat: dict[str, object] = {
            "load": state.load,
            "marginal_cost": _finite(state.marginal_cost),
            "threshold": state.threshold,
        }
        if self.host.endpoint is not None:
            beat["endpoint"] = self.host.endpoint
        if self.fragments is not None:
            beat["fragments"] = sorted(self.fragments)
        self.client.heartbeat(**beat)
        if self.availability is not None:
            self._keep_available(visible, replica_rows, liveness, beat)
        self._answer_offers(now, tasks, loads, contracts, liveness)
        if now - state.last_offer_at >= self.offer_interval:
            state.last_offer_at = now
            self._maybe_offer(now, tasks, loads, contracts, liveness)

    def _keep_available(
        self,
        visible: list[dict],
        replica_rows: list[dict],
        liveness: Mapping[str, str],
        beat: dict[str, object],
    ) -> None:
        """Keep the replicas this participant holds ready, and take over the tasks whose
        host the registry sees failed (app.participant.failover decides which and how)."""
        assert self.availability is not None
        contracts = self.client.contracts(status="active") if replica_rows else []
        # The tasks whose replicas I hold are not in my task list (I neither own nor host them).
        listed = {t["name"] for t in visible}
        visible = [*visible]
        for r in replica_rows:
            if r["host"] == self.name and r["task"] not in listed:
                try:
                    visible.append(self.client.task(r["task"]))
                except ApiError as exc:
                    self.state.errors.append(f"replica {r['task']}: {exc.detail}")
        self.availability.keep(visible, kept(self.name, replica_rows, contracts), replica_rows)
        for failover in plan_failovers(self.name, visible, replica_rows, contracts, liveness):
            self.availability.fail_over(failover)
            # A takeover takes seconds: the registry must not think this participant failed too.
            self.client.heartbeat(**beat)

    def _answer_offers(
        self,
        now: float,
        tasks: list[dict],
        loads: dict[str, float],
        contracts: list[ContractView],
        liveness: Mapping[str, str],
    ) -> None:
        offers = self.client.offers()
        by_id = {o["id"]: o for o in offers}
        for upstream in list(self.state.relays):
            if by_id.get(upstream, {}).get("status") != "open":
                del self.state.relays[upstream]  # withdrawn or decided elsewhere: stop waiting
        for offer in offers:
            if offer["to"] != self.name or offer["status"] != "open":
                continue
            self.state.offered_at[offer["from"]] = now
            offered = self._acceptable_kinds(self._offered_loads(offer))
            load = sum(loads.values())
            relay = self.state.relays.get(offer["id"])
            if relay is not None:
                downstream = by_id.get(relay.downstream_offer)
                if downstream is not None and downstream["status"] == "open":
                    continue  # still making room; the upstream offer waits for it
                chosen = self._take_after_relay(now, relay, downstream, loads, offered, offer)
            else:
                chosen = self.decisions.choose_accepted(
                    load=load, offered=offered, price=offer["price"], held=set(loads)
                )
                if not chosen and self._start_relay(
                    now, offer, offered, tasks, loads, contracts, liveness, by_id
                ):
                    continue
            try:
                if not chosen:
                    self.client.reject(offer["id"], offer["version"])
                    continue
                replicas = set(offer.get("replicas", []))
                reservation = self.decisions.taker_reservation(
                    load, sum(offered[t] for t in chosen)
                )
                accepted = self.client.accept(
                    offer["id"],
                    offer["version"],
                    [t for t in chosen if t not in replicas],
                    [t for t in chosen if t in replicas],
                    reservation_price=reservation if math.isfinite(reservation) else None,
                )
            except ApiError as exc:
                self.state.errors.append(f"offer {offer['id']}: {exc.detail}")
                if exc.status == 409 and exc.field == "reservation_price":
                    # No price suits both of us: decline, so the giver tries elsewhere.
                    self._reject_quietly(offer)
                continue
            self._perform(now, accepted)
            loads = {**loads, **{t: offered[t] for t in chosen}}

    def _reject_quietly(self, offer: dict) -> None:
        try:
            self.client.reject(offer["id"], offer["version"])
        except ApiError as exc:
            self.state.errors.append(f"offer {offer['id']}: {exc.detail}")

    def _available_partners(self, now: float, liveness: Mapping[str, str]) -> dict[str, bool]:
        # A partner that just refused load, or just tried to shed load to me, is loaded itself:
        # offering to it would only bounce, so it sits out a few offer intervals.
        def recent(when: dict[str, float], partner: str) -> bool:
            return now - when.get(partner, float("-inf")) < self.refusal_backoff

        return {
            partner: status == "online"
            and not recent(self.state.refused_at, partner)
            and not recent(self.state.offered_at, partner)
            for partner, status in liveness.items()
        }

    def _start_relay(
        self,
        now: float,
        offer: dict,
        offered: dict[str, float],
        tasks: list[dict],
        loads: dict[str, float],
        contracts: list[ContractView],
        liveness: Mapping[str, str],
        offers_by_id: Mapping[int, dict],
    ) -> bool:
        """Shed my own load to another partner so that I can take this offer afterwards."""
        chain = [*offer.get("relay_chain", []), offer["from"]]
        if len(chain) > MAX_RELAY_DEPTH or self.name in chain:
            return False
        busy = self.state.relays or any(
            o["from"] == self.name and o["status"] == "open" for o in offers_by_id.values()
        )
        if busy:
            return False
        plan = plan_room(
            upstream=offer["from"],
            upstream_price=offer["price"],
            offered_load=sum(offered.values()),
            movable={t["name"]: loads[t["name"]] for t in tasks if _movable(t)},
            contracts=contracts,
            partner_available=self._available_partners(now, liveness),
            last_refused=self.state.refused_at,
            chain=chain,
        )
        if plan is None:
            return False
        try:
            made = self.client.offer(
                plan.contract_id,
                list(plan.tasks),
                plan.price,
                {t: loads[t] for t in plan.tasks},
                relay_for=int(offer["id"]),
            )
        except ApiError as exc:
            self.state.errors.append(f"relay offer to {plan.partner}: {exc.detail}")
            return False
        self.state.relays[offer["id"]] = PendingRelay(
            int(made["id"]), plan.partner, sum(loads.values())
        )
        return True

    def _take_after_relay(
        self,
        now: float,
        relay: PendingRelay,
        downstream: dict | None,
        loads: dict[str, float],
        offered: dict[str, float],
        offer: dict,
    ) -> list[str]:
        del self.state.relays[offer["id"]]
        if downstream is None or downstream["status"] in ("rejected", "expired", "withdrawn"):
            self.state.refused_at[relay.partner] = now
        return take_after_room(
            load_now=load_after_relay(loads, downstream),
            load_before=relay.load_before,
            offered=offered,
            room_below_price=self.decisions.load_at_price(offer["price"]),
        )

    def _acceptable_kinds(self, offered: dict[str, float]) -> dict[str, float]:
        if self.accept_fragments is None and self.fragments is None:
            return offered
        kept = {}
        for name, load in offered.items():
            try:
                row = self.client.task(name)
            except ApiError:
                continue  # cannot tell what it runs: do not take it
            fragment, work = row.get("fragment"), row.get("work") or {}
            if self.accept_fragments is not None and fragment not in (None, *self.accept_fragments):
                continue
            if (
                self.fragments is not None
                and work.get("python")
                and not is_allowed(work.get("distribution"), self.fragments)
            ):
                continue  # its host would refuse to run it
            kept[name] = load
        return kept

    def _offered_loads(self, offer: dict) -> dict[str, float]:
        # The offer names tasks and replicas; their declared loads are what the giver measured
        # and sells.
        names = [*offer["tasks"], *offer.get("replicas", [])]
        return {t: float(offer["loads"].get(t, 0.0)) for t in names}

    def _perform(self, now: float, accepted: dict) -> None:
        for movement_id in accepted["movement_ids"]:
            # The registry prepared these movements when it took the accept: read each by id.
            movement = MovementRecord.from_read(self.client.movement(movement_id))
            try:
                # A replica moves through the mover like a primary: the standby must be in
                # place here before the registry names this participant its host.
                receive = self.mover.receive_replica if movement.replica else self.mover.receive
                received = receive(movement)
            except Exception as exc:  # the move is aborted by the mover; keep the agent alive
                log.warning("move of %s to %s failed: %s", movement.task, self.name, exc)
                self.state.errors.append(f"move {movement.task}: {exc}")
                continue
            if self.on_move is not None:
                self.on_move(
                    MoveEvent(
                        now,
                        movement.task,
                        movement.source,
                        self.name,
                        movement.price,
                        movement.reason,
                        movement_id,
                        received.state_bytes,
                        dict(received.timings),
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
        if self.state.relays or any(o["status"] == "open" for o in mine):
            return
        self._note_refusal(now, mine)
        if self._maybe_move_back(tasks, loads, contracts):
            return
        available = self._available_partners(now, liveness)
        movable = {t["name"]: loads[t["name"]] for t in tasks if _movable(t)}
        movable.update({name: loads[name] for name in self.state.replicas})
        plan = self.decisions.plan_offer(
            load=sum(loads.values()),
            movable=movable,
            contracts=contracts,
            partner_online=available,
            replicas=self.state.replicas,
            held_by=self._not_offered_to(now),
            too_large=self._too_large(now),
        )
        if plan is None:
            return
        offered = [t for t in plan.tasks if t not in plan.replicas]
        try:
            made = self.client.offer(
                plan.contract_id,
                offered,
                plan.price,
                {t: movable[t] for t in plan.tasks},
                replicas=list(plan.replicas),
                reservation_price=plan.reservation,
            )
        except ApiError as exc:
            self.state.errors.append(f"offer to {plan.partner}: {exc.detail}")
            if exc.status == 409:
                # Refused outright (a copy already there, say): try the next partner.
                self.state.refused_at[plan.partner] = now
            unrunnable = runnable.refused_task(exc.field, offered, plan.replicas)
            if exc.status == 422 and unrunnable is not None:
                self.state.cannot_run.setdefault(plan.partner, {})[unrunnable] = now
            return
        self.state.last_offer = (int(made["id"]), plan.partner)

    def _maybe_move_back(
        self, tasks: list[dict], loads: dict[str, float], contracts: list[ContractView]
    ) -> bool:
        """Offer tasks that I host for an owner back to it, at the price in force, once the
        contract's minimum move duration has passed and keeping them costs me more than they
        pay (DESIGN.md: "after the minimum move duration, load moves back when that is cheaper
        for both"; the owner's acceptance, partial if it must be, is the other half).

        One offer carries every task of one owner and price that qualifies together (largest
        first, while the set's saving per unit still beats the price): returned one per offer
        interval, a loaded host gave them back over minutes while the owner re-shed each."""
        by_id = {c.id: c for c in contracts}
        load = sum(loads.values())
        wall = self.clock()
        groups: dict[tuple[int, float], list[dict]] = {}
        for task in tasks:
            contract = by_id.get(task.get("contract_id") or -1)
            if (
                task["owner"] == self.name
                or task.get("price") is None
                or contract is None
                or contract.partner != task["owner"]
                or not _movable(task)
            ):
                continue
            held_for = (wall - _when(task["host_since"])).total_seconds()
            if held_for >= contract.min_move_seconds:
                groups.setdefault((contract.id, float(task["price"])), []).append(task)
        for (contract_id, price), due in sorted(groups.items()):
            chosen: list[str] = []
            shed = 0.0
            for task in sorted(due, key=lambda t: (-loads[t["name"]], t["name"])):
                size = loads[task["name"]]
                if self.decisions.returns(
                    load=load,
                    task_load=shed + size,
                    price=price,
                    held_for=float("inf"),
                    min_move=0.0,
                ):
                    chosen.append(task["name"])
                    shed += size
            if not chosen:
                continue
            try:
                made = self.client.offer(
                    contract_id, chosen, price, {name: loads[name] for name in chosen}
                )
            except ApiError as exc:
                self.state.errors.append(f"move-back of {', '.join(chosen)}: {exc.detail}")
                continue
            self.state.last_offer = (int(made["id"]), by_id[contract_id].partner)
            return True
        return False

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
        if last is not None and last["status"] == "rejected" and last["loads"]:
            self.state.refused_size[partner] = (min(last["loads"].values()), now)
        elif last is not None and last["status"] in ("accepted", "partially_accepted"):
            self.state.refused_size.pop(partner, None)
        self.state.last_offer = None

    def _not_offered_to(self, now: float) -> dict[str, set[str]]:
        """Per partner, the tasks not to offer it: copies it holds, and python fragments it
        was refused lately (its agent may advertise the distribution later)."""
        horizon = 3 * self.refusal_backoff
        out = {partner: set(held) for partner, held in self.state.held_by.items()}
        for partner, refused in self.state.cannot_run.items():
            recent = {task for task, when in refused.items() if now - when < horizon}
            out.setdefault(partner, set()).update(recent)
        return out

    def _too_large(self, now: float) -> dict[str, float]:
        # A partner's room changes as load moves: a refusal's size limit holds for a few
        # back-off periods, then the partner may be offered anything again.
        horizon = 3 * self.refusal_backoff
        return {
            partner: size
            for partner, (size, when) in self.state.refused_size.items()
            if now - when < horizon
        }


def _wall_clock() -> datetime:
    return datetime.now(UTC)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _when(stamp: str | datetime) -> datetime:
    moment = stamp if isinstance(stamp, datetime) else datetime.fromisoformat(stamp)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def load_after_relay(loads: Mapping[str, float], downstream: Mapping[str, Any] | None) -> float:
    """My load once the tasks my relay's partner accepted have left.

    The tick read my tasks before it read the offers, so a relay accepted in between still
    counts its tasks here (their movements are prepared, not committed yet): judged on that,
    the room the relay made went unused, the upstream offer was refused, and the giver came
    back after its back-off to find the room taken by someone else's relay (the demo, session
    30: B's last two tasks took ~40 s each to place, and the run ended before they did)."""
    leaving: set[str] = set()
    if downstream is not None and downstream.get("status") in ("accepted", "partially_accepted"):
        leaving = {*downstream.get("accepted_tasks", []), *downstream.get("accepted_replicas", [])}
    return math.fsum(load for name, load in loads.items() if name not in leaving)


def _movable(task: dict) -> bool:
    # A source produces its owner's data where the owner is; pinned tasks are an admin's call.
    return not task["pinned"] and not TaskRecord.from_read(task).source
