"""The registry in memory: the service's rules for offers, movements, tasks and payments, with
no database and no web framework, on a clock the caller gives (a simulated one, usually).

It is the registry a participant node (``app.participant.node.Agent``) talks to when the
simulator composes nodes instead of re-implementing them (DESIGN.md "A participant is a
process"). ``MemoryRegistry.client_for(name)`` is one participant's view: it satisfies
``app.participant.ports.Registry`` and sees what the REST API would show that participant
(its own contracts, offers, tasks and movements). Errors are the service's, as ``ApiError``
with the same status and field (409 for a lost race or a refused price, 422 for bad input,
404 for what the caller may not see, 403 for the wrong party).

The rules, as the service has them (``app.offers.service``, ``app.movements.service``,
``app.movements.payments``, ``app.movements.hops``; read there, not imported: those are
service modules):

- **Offers.** Over an active contract, at a price inside its range and at most the giver's
  reservation, of tasks the giver hosts (not pinned, not already moving); one offer
  outstanding per participant. A relay (``relay_for``) names an open offer addressed
  to the giver, and follows ``protocol.relay_refusal`` (never back to a giver of its chain, at
  most ``MAX_RELAY_DEPTH`` relays).
- **Acceptance.** By the addressee, at the offer's current version, of all offered tasks or a
  subset (partial acceptance); the agreed price is ``protocol.negotiated_price`` between both
  reservations inside the range, the offered price without the giver's, and a 409 on
  ``reservation_price`` when no price suits both. Accepting prepares one movement per task
  (epoch = the task's lease epoch + 1; reason ``move_back`` when the target is the owner).
- **Movements.** The target commits (its epoch, the task still at the source with the
  epoch before): the host switches, the lease epoch rises, ``host_since`` is now, the task
  carries the contract and price of its last hop (none at its owner), and its load becomes the
  load the offer sold. Either party may abort. Exactly one host per task at every instant:
  prepare changes nothing about hosting.
- **Payments.** Per unit load per second on every paid hop of a task's journey (A pays B,
  and B, having passed it on, pays C; a move back unwinds the hops after it; home ends them
  all), under active contracts, charged before every change of hops or load. Every entry has
  one payer and one payee, so balances sum to zero.

Replicas are not modelled: ``replicas()`` is empty and offers of replicas are refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.market import protocol
from app.participant.client import ApiError


def _conflict(detail: str, field: str) -> ApiError:
    return ApiError(409, detail, field)


def _invalid(detail: str, field: str) -> ApiError:
    return ApiError(422, detail, field)


def _not_found(detail: str, field: str) -> ApiError:
    return ApiError(404, detail, field)


@dataclass
class Contract:
    id: int
    a: str
    b: str
    price_min: float
    price_max: float
    min_move_seconds: float = 0.0
    replica_hosting: bool = False
    status: str = "active"

    def partner_of(self, me: str) -> str:
        return self.b if me == self.a else self.a

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "proposer": self.a,
            "partner": self.b,
            "price_min": self.price_min,
            "price_max": self.price_max,
            "min_move_seconds": self.min_move_seconds,
            "status": self.status,
            "availability": {"replica_hosting": self.replica_hosting},
        }


@dataclass(frozen=True)
class Hop:
    """A paid hop of a task's journey: ``payer`` pays ``payee`` under ``contract_id``."""

    payer: str
    payee: str
    contract_id: int
    price: float


@dataclass
class Task:
    name: str
    owner: str
    host: str
    load: float
    host_since: datetime
    pinned: bool = False
    fragment: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    lease_epoch: int = 1
    contract_id: int | None = None
    price: float | None = None
    hops: list[Hop] = field(default_factory=list)
    accrued_at: datetime | None = None  # paid up to here (None: never moved, nothing to pay)


@dataclass
class Offer:
    id: int
    contract_id: int
    src: str
    to: str
    tasks: list[str]
    loads: dict[str, float]
    price: float
    reservation: float | None = None  # the giver's, private
    relay_for: int | None = None
    relay_chain: tuple[str, ...] = ()  # givers upstream of this one, origin first
    status: str = "open"
    version: int = 1
    accepted_tasks: list[str] = field(default_factory=list)
    agreed_price: float | None = None
    movement_ids: list[int] = field(default_factory=list)
    created_at: datetime | None = None
    decided_at: datetime | None = None

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "contract_id": self.contract_id,
            "from": self.src,
            "to": self.to,
            "tasks": list(self.tasks),
            "replicas": [],
            "loads": dict(self.loads),
            "accepted_tasks": list(self.accepted_tasks),
            "accepted_replicas": [],
            "price": self.price,
            "agreed_price": self.agreed_price,
            "status": self.status,
            "version": self.version,
            "movement_ids": list(self.movement_ids),
            "relay_for": self.relay_for,
            "relay_chain": list(self.relay_chain),
            "created_at": _stamp(self.created_at),
            "decided_at": _stamp(self.decided_at),
        }


@dataclass
class Movement:
    id: int
    task: str
    src: str
    to: str
    epoch: int
    reason: str
    contract_id: int | None
    price: float | None
    offer_id: int | None
    status: str = "prepared"
    prepared_at: datetime | None = None
    finished_at: datetime | None = None

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "from": self.src,
            "to": self.to,
            "epoch": self.epoch,
            "reason": self.reason,
            "status": self.status,
            "contract_id": self.contract_id,
            "offer_id": self.offer_id,
            "price": self.price,
            "replica": False,
            "prepared_at": _stamp(self.prepared_at),
            "finished_at": _stamp(self.finished_at),
        }


@dataclass(frozen=True)
class LedgerEntry:
    at: datetime
    payer: str
    payee: str
    contract_id: int
    task: str
    load: float
    price: float
    seconds: float

    @property
    def amount(self) -> float:
        return self.load * self.price * self.seconds


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def after_move(
    owner: str, chain: list[Hop], src: str, dst: str, contract: int | None, price: float | None
) -> list[Hop]:
    """The paid hops once a move ``src -> dst`` commits on top of ``chain`` (as
    ``app.movements.hops.after_move``): home ends every hop, back to an earlier host unwinds the
    hops after it, a move outside a contract is not a sale."""
    if dst == owner:
        return []
    earlier = [i for i, hop in enumerate(chain) if hop.payer == dst]
    if earlier:
        return chain[: earlier[0]]
    if contract is None or price is None:
        return list(chain)
    return [*chain, Hop(src, dst, contract, price)]


def wall_clock() -> datetime:
    return datetime.now(UTC)


class MemoryRegistry:
    """The whole registry, as an admin sees it; ``client_for(name)`` is one participant's view.

    Set-up (the admin's and the owners' side): ``add_participant``, ``add_contract``,
    ``add_task``, ``set_task_load``, ``join``, ``leave``. Participant actions take the acting
    participant first (``offer(me, ...)``); the views pass their name.
    """

    def __init__(self, clock: Callable[[], datetime] = wall_clock) -> None:
        self.clock = clock
        self.online: dict[str, bool] = {}
        self.contracts: dict[int, Contract] = {}
        self.tasks: dict[str, Task] = {}
        self.offers: dict[int, Offer] = {}
        self.movements: dict[int, Movement] = {}
        self.ledger: list[LedgerEntry] = []
        self.heartbeats: dict[str, dict[str, Any]] = {}
        self.writes = 0  # every change of state counts one: drivers use it to tell quiet
        self._ids = 0
        self._offers_of: dict[str, list[int]] = {}
        self._movements_of: dict[str, list[int]] = {}

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # --- set-up ---------------------------------------------------------------------------

    def add_participant(self, name: str, *, online: bool = True) -> None:
        self.online[name] = online
        self._offers_of.setdefault(name, [])
        self._movements_of.setdefault(name, [])

    def add_contract(
        self,
        a: str,
        b: str,
        price_min: float,
        price_max: float,
        min_move_seconds: float = 0.0,
        *,
        replica_hosting: bool = False,
    ) -> int:
        if a not in self.online or b not in self.online:
            raise _invalid(f"unknown participant in contract {a}-{b}", "between")
        contract = Contract(
            self._next_id(), a, b, price_min, price_max, min_move_seconds, replica_hosting
        )
        self.contracts[contract.id] = contract
        return contract.id

    def add_task(
        self,
        name: str,
        owner: str,
        load: float,
        *,
        host: str | None = None,
        pinned: bool = False,
        fragment: str | None = None,
        params: dict[str, Any] | None = None,
        inputs: Iterable[str] = (),
    ) -> None:
        if name in self.tasks:
            raise _conflict(f"task {name!r} exists", "name")
        if load < 0:
            raise _invalid(f"load must be >= 0, got {load}", "load")
        self.tasks[name] = Task(
            name,
            owner,
            host or owner,
            float(load),
            self.clock(),
            pinned,
            fragment,
            dict(params or {}),
            tuple(inputs),
        )

    def set_task_load(self, name: str, load: float) -> None:
        """The owner declares a new load: the time so far is paid at the old one first."""
        if load < 0:
            raise _invalid(f"load must be >= 0, got {load}", "load")
        task = self.tasks[name]
        if task.load == load:
            return
        self._accrue(task, self.clock())
        task.load = float(load)
        self.writes += 1

    def join(self, name: str) -> None:
        self.online[name] = True
        self.writes += 1

    def leave(self, name: str) -> list[Movement]:
        """``name`` goes offline: its open offers and the offers to it are withdrawn, movements
        it takes part in are aborted, the tasks it hosts for others go back to whoever gave them
        to it, and its own tasks go home with it (committed, as the admin relocations they are).
        Returns those relocations."""
        now = self.clock()
        self.online[name] = False
        for offer in self.offers.values():
            if offer.status == "open" and name in (offer.src, offer.to):
                self._close(offer, "withdrawn", now)
        for movement in self.movements.values():
            if movement.status == "prepared" and name in (movement.src, movement.to):
                movement.status, movement.finished_at = "aborted", now
        moved = []
        for task in sorted(self.tasks.values(), key=lambda t: t.name):
            if task.owner == name:
                if task.host != name:
                    moved.append(self._relocate(task, name, "leave", now))
                continue
            # Back to whoever gave it to the leaver (its first hop through it), as the simulator.
            cut = next((h for h in task.hops if name in (h.payer, h.payee)), None)
            if cut is not None:
                moved.append(self._relocate(task, cut.payer, "leave", now))
            elif task.host == name:
                moved.append(self._relocate(task, task.owner, "leave", now))
        self.writes += 1
        return moved

    def _relocate(self, task: Task, to: str, reason: str, now: datetime) -> Movement:
        """A relocation outside the market, prepared and committed at once."""
        movement = Movement(
            self._next_id(),
            task.name,
            task.host,
            to,
            task.lease_epoch + 1,
            reason,
            None,
            None,
            None,
            prepared_at=now,
        )
        self._register(movement)
        self._switch(movement, task, now)
        return movement

    # --- views ----------------------------------------------------------------------------

    def client_for(self, name: str) -> ParticipantView:
        if name not in self.online:
            raise _not_found(f"participant {name!r} not found", "name")
        return ParticipantView(self, name)

    def contract_active(self, contract: Contract) -> bool:
        """Active, and both parties in the federation now (a party that left, or has not yet
        joined, has no live contract)."""
        return (
            contract.status == "active"
            and self.online.get(contract.a, False)
            and self.online.get(contract.b, False)
        )

    def host_of(self, name: str) -> str:
        return self.tasks[name].host

    def loads(self) -> dict[str, float]:
        """Each online participant's load: the tasks it hosts whose owners are online."""
        out = {p: 0.0 for p, up in self.online.items() if up}
        for task in self.tasks.values():
            if task.host in out and self.online.get(task.owner, False):
                out[task.host] += task.load
        return out

    def hosted(self, participant: str) -> dict[str, float]:
        return {
            t.name: t.load
            for t in self.tasks.values()
            if t.host == participant and self.online.get(t.owner, False)
        }

    # --- payments -------------------------------------------------------------------------

    def _accrue(self, task: Task, now: datetime) -> float:
        start = task.accrued_at
        if start is None or now <= start:
            return 0.0
        seconds = (now - start).total_seconds()
        task.accrued_at = now
        if task.load <= 0:
            return 0.0
        total = 0.0
        for hop in task.hops:
            contract = self.contracts.get(hop.contract_id)
            if contract is None or contract.status != "active":
                continue
            entry = LedgerEntry(
                now,
                hop.payer,
                hop.payee,
                hop.contract_id,
                task.name,
                task.load,
                hop.price,
                seconds,
            )
            self.ledger.append(entry)
            total += entry.amount
        return total

    def accrue_all(self, now: datetime | None = None) -> float:
        """Bring every task's payments up to ``now`` (default: the clock)."""
        moment = now or self.clock()
        return math.fsum(self._accrue(t, moment) for t in self.tasks.values())

    def balances(self) -> dict[str, float]:
        """Net payments per participant: received less paid. They sum to zero."""
        out = dict.fromkeys(self.online, 0.0)
        for e in self.ledger:
            out[e.payer] -= e.amount
            out[e.payee] += e.amount
        return out

    def paid_total(self) -> float:
        return math.fsum(e.amount for e in self.ledger)

    def ledger_by_pair(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for e in self.ledger:
            key = f"{e.payer}->{e.payee}"
            out[key] = out.get(key, 0.0) + e.amount
        return dict(sorted(out.items()))

    # --- participant actions --------------------------------------------------------------

    def _visible_contract(self, me: str, contract_id: int) -> Contract:
        contract = self.contracts.get(contract_id)
        if contract is None or me not in (contract.a, contract.b):
            raise _not_found(f"contract {contract_id} not found", "contract_id")
        return contract

    def _visible_offer(self, me: str, offer_id: int) -> Offer:
        offer = self.offers.get(offer_id)
        if offer is None or me not in (offer.src, offer.to):
            raise _not_found(f"offer {offer_id} not found", "id")
        return offer

    def _prepared_for(self, task: str) -> Movement | None:
        for mid in reversed(self._movements_of.get(self.tasks[task].host, [])):
            m = self.movements[mid]
            if m.task == task and m.status == "prepared":
                return m
        return None

    def offer(
        self,
        me: str,
        contract_id: int,
        tasks: list[str],
        price: float,
        loads: dict[str, float] | None = None,
        relay_for: int | None = None,
        replicas: list[str] | None = None,
        reservation_price: float | None = None,
    ) -> dict[str, Any]:
        contract = self._visible_contract(me, contract_id)
        if not self.contract_active(contract):
            raise _conflict(f"contract {contract.id} is not active", "contract_id")
        if not contract.price_min <= price <= contract.price_max:
            raise _invalid(
                f"price {price} is outside the contract's range "
                f"[{contract.price_min}, {contract.price_max}]",
                "price",
            )
        if reservation_price is not None and price > reservation_price:
            raise _invalid(
                f"price {price} is above your reservation_price {reservation_price}",
                "reservation_price",
            )
        if replicas:
            raise _invalid("this registry holds no replicas", "replicas[0]")
        if not tasks:
            raise _invalid("offer at least one task or replica", "tasks")
        if len(set(tasks)) != len(tasks):
            raise _invalid("a task is listed twice", "tasks")
        partner = contract.partner_of(me)
        for i, name in enumerate(tasks):
            task = self.tasks.get(name)
            if task is None or task.host != me:
                raise _invalid(f"you do not host a task named {name!r}", f"tasks[{i}]")
            if task.pinned:
                raise _conflict(f"task {name} is pinned by an admin", f"tasks[{i}]")
        outstanding = next(
            (
                o
                for o in self._offers_of[me]
                if self.offers[o].src == me and self.offers[o].status == "open"
            ),
            None,
        )
        if outstanding is not None:
            raise _conflict(
                f"you already have offer {outstanding} outstanding; one at a time", "contract_id"
            )
        if any(self._prepared_for(name) is not None for name in tasks):
            raise _conflict("a task of this offer is already being moved", "tasks")
        sold = {name: self.tasks[name].load for name in tasks}
        for name, load in (loads or {}).items():
            if name not in sold:
                raise _invalid(f"a load is given for {name!r}, which is not offered", "loads")
            if load < 0:
                raise _invalid(f"load {load} is negative", f"loads.{name}")
            sold[name] = float(load)
        if relay_for is not None:
            upstream = self.offers.get(relay_for)
            if upstream is None or upstream.to != me:
                raise _invalid(f"no offer {relay_for} addressed to you", "relay_for")
            if upstream.status != "open":
                raise _conflict(f"offer {relay_for} is {upstream.status}, not open", "relay_for")
            chain = (*upstream.relay_chain, upstream.src)
            refusal = protocol.relay_refusal(chain, me, partner)
            if refusal is not None:
                if partner in chain:
                    raise _invalid(refusal, "relay_for")
                raise _conflict(refusal, "relay_for")
        offer = Offer(
            self._next_id(),
            contract.id,
            me,
            partner,
            list(tasks),
            sold,
            float(price),
            reservation_price,
            relay_for,
            chain if relay_for is not None else (),
            created_at=self.clock(),
        )
        self.offers[offer.id] = offer
        self._offers_of[me].append(offer.id)
        self._offers_of[partner].append(offer.id)
        self.writes += 1
        return offer.row()

    def _decidable(self, me: str, offer_id: int, version: int, *, by: str) -> Offer:
        offer = self._visible_offer(me, offer_id)
        if me != (offer.to if by == "addressee" else offer.src):
            raise ApiError(403, f"only the offer's {by} may do this", "id")
        if offer.version != version:
            raise _conflict(
                f"stale version: you sent {version}, the offer is at version {offer.version} "
                f"(status {offer.status})",
                "version",
            )
        if offer.status != "open":
            raise _conflict(f"offer {offer.id} is {offer.status}", "status")
        return offer

    def accept(
        self,
        me: str,
        offer_id: int,
        version: int,
        tasks: list[str] | None = None,
        replicas: list[str] | None = None,
        reservation_price: float | None = None,
    ) -> dict[str, Any]:
        offer = self._decidable(me, offer_id, version, by="addressee")
        if replicas:
            raise _invalid("replica 'x' is not part of this offer", "replicas[0]")
        if tasks is None:
            chosen = list(offer.tasks)
        else:
            for i, name in enumerate(tasks):
                if name not in offer.tasks:
                    raise _invalid(f"task {name!r} is not part of offer {offer.id}", f"tasks[{i}]")
            chosen = list(tasks)
        if not chosen:
            raise _invalid("accept at least one task, or reject the offer", "tasks")
        contract = self.contracts[offer.contract_id]
        if not self.contract_active(contract):
            raise _conflict(f"contract {contract.id} is not active", "contract_id")
        price = agreed_price(
            offer.price,
            offer.reservation,
            reservation_price,
            contract.price_min,
            contract.price_max,
        )
        chosen.sort()
        # Every check before any change: a refused acceptance changes nothing.
        for name in chosen:
            task = self.tasks[name]
            if task.pinned:
                raise _conflict(
                    f"task {name} is pinned by an admin; the market may not move it", "tasks"
                )
            if self._prepared_for(name) is not None:
                raise _conflict(f"task {name} is already being moved", "tasks")
            if task.host == offer.to:
                raise _invalid(f"{offer.to} already hosts task {name}", "to")
            if not self.online.get(offer.to, False):
                raise _conflict(f"{offer.to} may not take tasks", "to")
        now = self.clock()
        for name in chosen:
            task = self.tasks[name]
            movement = Movement(
                self._next_id(),
                name,
                task.host,
                offer.to,
                task.lease_epoch + 1,
                "move_back" if task.owner == offer.to else "load",
                contract.id,
                price,
                offer.id,
                prepared_at=now,
            )
            self._register(movement)
            offer.movement_ids.append(movement.id)
        offer.accepted_tasks = chosen
        offer.agreed_price = price
        status = "accepted" if len(chosen) == len(offer.tasks) else "partially_accepted"
        self._close(offer, status, now)
        return offer.row()

    def _register(self, movement: Movement) -> None:
        self.movements[movement.id] = movement
        self._movements_of.setdefault(movement.src, []).append(movement.id)
        self._movements_of.setdefault(movement.to, []).append(movement.id)
        self.writes += 1

    def _close(self, offer: Offer, status: str, now: datetime) -> None:
        offer.status, offer.decided_at = status, now
        offer.version += 1
        self.writes += 1

    def reject(self, me: str, offer_id: int, version: int) -> dict[str, Any]:
        offer = self._decidable(me, offer_id, version, by="addressee")
        self._close(offer, "rejected", self.clock())
        return offer.row()

    def withdraw(self, me: str, offer_id: int, version: int) -> dict[str, Any]:
        offer = self._decidable(me, offer_id, version, by="sender")
        self._close(offer, "withdrawn", self.clock())
        return offer.row()

    def _visible_movement(self, me: str, movement_id: int) -> Movement:
        movement = self.movements.get(movement_id)
        if movement is None or me not in (movement.src, movement.to):
            raise _not_found(f"movement {movement_id} not found", "id")
        return movement

    def commit(self, me: str, movement_id: int, epoch: int) -> dict[str, Any]:
        """The new host reports that it runs the task: it becomes the host of record."""
        movement = self._visible_movement(me, movement_id)
        if me != movement.to:
            raise ApiError(403, "only the receiving participant commits a movement", "id")
        if movement.status != "prepared":
            raise _conflict(f"movement {movement.id} is {movement.status}", "status")
        if epoch != movement.epoch:
            raise _conflict(
                f"stale epoch {epoch}: this movement holds epoch {movement.epoch}", "epoch"
            )
        task = self.tasks[movement.task]
        if task.host != movement.src or task.lease_epoch != movement.epoch - 1:
            raise _conflict(f"task {task.name} changed host since this movement was prepared", "id")
        now = self.clock()
        if movement.offer_id is not None:
            sold = self.offers[movement.offer_id].loads.get(task.name)
            self._switch(movement, task, now, sold)
        else:
            self._switch(movement, task, now)
        return movement.row()

    def _switch(
        self, movement: Movement, task: Task, now: datetime, sold: float | None = None
    ) -> None:
        self._accrue(task, now)
        if sold is not None:
            task.load = sold  # payments from now on are for the load that was sold
        task.hops = after_move(
            task.owner,
            task.hops,
            movement.src,
            movement.to,
            movement.contract_id,
            movement.price,
        )
        task.accrued_at = now if task.hops else None
        task.host = movement.to
        task.lease_epoch = movement.epoch
        task.host_since = now
        home = movement.to == task.owner
        task.contract_id = None if home else movement.contract_id
        task.price = None if home else movement.price
        movement.status, movement.finished_at = "committed", now
        self.writes += 1

    def abort(self, me: str, movement_id: int) -> dict[str, Any]:
        movement = self._visible_movement(me, movement_id)
        if movement.status != "prepared":
            raise _conflict(f"movement {movement.id} is {movement.status}", "status")
        movement.status, movement.finished_at = "aborted", self.clock()
        self.writes += 1
        return movement.row()

    def heartbeat(self, me: str, **report: Any) -> dict[str, Any]:
        """Record the report; the payments it vouches for (tasks ``me`` owns and has shed) are
        brought up to now, as the service does."""
        now = self.clock()
        for task in self.tasks.values():
            if task.owner == me and task.host != me:
                self._accrue(task, now)
        self.heartbeats[me] = {"at": now, **report}
        return {"name": me, **report}

    # --- reads (one participant's) --------------------------------------------------------

    def task_row(self, task: Task) -> dict[str, Any]:
        return {
            "name": task.name,
            "owner": task.owner,
            "host": task.host,
            "load": task.load,
            "contract_id": task.contract_id,
            "price": task.price,
            "host_since": task.host_since.isoformat(),
            "pinned": task.pinned,
            "lease_epoch": task.lease_epoch,
            "fragment": task.fragment,
            "params": dict(task.params),
            "inputs": [
                {"task": i, "fragment": self.tasks[i].fragment if i in self.tasks else None}
                for i in task.inputs
            ],
        }

    def tasks_of(self, me: str) -> list[dict[str, Any]]:
        return [self.task_row(t) for t in self.tasks.values() if me in (t.owner, t.host)]

    def readable_task(self, me: str, name: str) -> dict[str, Any]:
        """As ``GET /v1/tasks/{name}``: its owner and host, the target of its prepared movement,
        and the addressee of an open offer naming it; 404 for anyone else."""
        task = self.tasks.get(name)
        if task is not None:
            prepared = self._prepared_for(name)
            if (
                me in (task.owner, task.host)
                or (prepared is not None and prepared.to == me)
                or any(
                    self.offers[o].to == me
                    and self.offers[o].status == "open"
                    and name in self.offers[o].tasks
                    for o in self._offers_of.get(me, [])
                )
            ):
                return self.task_row(task)
        raise _not_found(f"task {name!r} not found", "name")

    def contracts_of(self, me: str, status: str | None = None) -> list[dict[str, Any]]:
        out = []
        for c in self.contracts.values():
            if me not in (c.a, c.b):
                continue
            row = c.row()
            row["status"] = "active" if self.contract_active(c) else "inactive"
            if status is None or row["status"] == status:
                out.append(row)
        return out

    def offers_of(self, me: str, status: str | None = None) -> list[dict[str, Any]]:
        return [
            self.offers[o].row()
            for o in self._offers_of.get(me, [])
            if status is None or self.offers[o].status == status
        ]

    def movement_row(self, me: str, movement_id: int) -> dict[str, Any]:
        return self._visible_movement(me, movement_id).row()


def agreed_price(
    offered: float,
    giver_reservation: float | None,
    taker_reservation: float | None,
    price_min: float,
    price_max: float,
) -> float:
    """The price an acceptance moves load at, or a 409 on ``reservation_price`` (the service's
    ``app.offers.service.agreed_price``, with ``protocol.negotiated_price``)."""
    if taker_reservation is None:
        return offered
    if giver_reservation is None:
        if taker_reservation > offered:
            raise _conflict(
                f"your reservation_price {taker_reservation} is above the offered price "
                f"{offered}: no deal at this price",
                "reservation_price",
            )
        return offered
    price = protocol.negotiated_price(giver_reservation, taker_reservation, price_min, price_max)
    if price is None:
        raise _conflict(
            f"your reservation_price {taker_reservation} leaves no price both sides accept",
            "reservation_price",
        )
    return price


@dataclass(frozen=True)
class ParticipantView:
    """One participant's registry: ``app.participant.ports.Registry`` over the memory registry,
    seeing only what the REST API shows that participant."""

    registry: MemoryRegistry
    me: str

    def heartbeat(self, **report: Any) -> dict[str, Any]:
        return self.registry.heartbeat(self.me, **report)

    def contracts(self, status: str | None = None) -> list[dict[str, Any]]:
        return self.registry.contracts_of(self.me, status)

    def tasks(self) -> list[dict[str, Any]]:
        return self.registry.tasks_of(self.me)

    def task(self, name: str) -> dict[str, Any]:
        return self.registry.readable_task(self.me, name)

    def replicas(self) -> list[dict[str, Any]]:
        return []

    def offers(self, status: str | None = None) -> list[dict[str, Any]]:
        return self.registry.offers_of(self.me, status)

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
        return self.registry.offer(
            self.me, contract_id, tasks, price, loads, relay_for, replicas, reservation_price
        )

    def accept(
        self,
        offer_id: int,
        version: int,
        tasks: list[str] | None = None,
        replicas: list[str] | None = None,
        reservation_price: float | None = None,
    ) -> dict[str, Any]:
        return self.registry.accept(self.me, offer_id, version, tasks, replicas, reservation_price)

    def reject(self, offer_id: int, version: int) -> dict[str, Any]:
        return self.registry.reject(self.me, offer_id, version)

    def withdraw(self, offer_id: int, version: int) -> dict[str, Any]:
        return self.registry.withdraw(self.me, offer_id, version)

    def movement(self, movement_id: int) -> dict[str, Any]:
        return self.registry.movement_row(self.me, movement_id)

    def commit(self, movement_id: int, epoch: int) -> dict[str, Any]:
        return self.registry.commit(self.me, movement_id, epoch)

    def abort(self, movement_id: int) -> dict[str, Any]:
        return self.registry.abort(self.me, movement_id)
