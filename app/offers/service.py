"""BPM offers between two parties of an active contract.

A participant offers tasks it hosts to a partner at a price inside the contract's range; the
partner accepts all of them, a subset (partial acceptance), or none. One offer outstanding per
participant, and no offer of a task that is already moving (DESIGN.md "Moves"). Accepting
prepares one two-phase movement per accepted task; the new host commits each after resuming it.

Prices (``app.market.protocol``): the giver may send its reservation price with the offer (the
most it would pay), the taker its own with the acceptance (the least it would take). With both,
the registry sets the agreed price with ``protocol.negotiated_price``, the midpoint of the two
reservations' overlap with the contract's range, and refuses the acceptance (409,
``reservation_price``) when no price works for both. The agreed price is what the accepted
movements, and so the tasks and their payments, carry; without reservations it is the offered
price. Reservations are kept in the offer's ``detail`` and never shown to the other side.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Row, Select, Table, bindparam, or_, select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.contracts import service as contracts
from app.db.base import utcnow
from app.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.market import protocol, runnable
from app.models import (
    ContractStatus,
    Movement,
    MovementReason,
    Offer,
    OfferStatus,
    Participant,
    Task,
)
from app.movements import replicas as replica_rows
from app.movements import service as movements
from app.offers.schemas import OfferCreate, OfferRead
from app.participants import repository as participants
from app.participants.failures import check_not_fenced


def _tasks_by_name(session: Session, names: list[str]) -> dict[str, Task]:
    return {t.name: t for t in session.scalars(select(Task).where(Task.name.in_(names)))}


def create(session: Session, principal: Principal, data: OfferCreate) -> Offer:
    if principal.participant_id is None:
        raise InvalidInput("offers are made by participants, not the admin key")
    me = principal.participant_id
    # A participant the registry declared failed holds nothing it may sell until it rejoins.
    check_not_fenced(session.get(Participant, me), acting_as="offer tasks")
    contract = contracts.get_visible(session, principal, data.contract_id)
    if contract.status is not ContractStatus.active:
        raise Conflict(
            f"contract {contract.id} is {contract.status.value}, not active", field="contract_id"
        )
    if not contract.price_min <= data.price <= contract.price_max:
        raise InvalidInput(
            f"price {data.price} is outside the contract's range "
            f"[{contract.price_min}, {contract.price_max}]",
            field="price",
        )
    if data.reservation_price is not None and data.price > data.reservation_price:
        raise InvalidInput(
            f"price {data.price} is above your reservation_price {data.reservation_price}, the "
            "most you would pay",
            field="reservation_price",
        )
    if not data.tasks and not data.replicas:
        raise InvalidInput("offer at least one task or replica", field="tasks")
    names = [*data.tasks, *data.replicas]
    if len(set(names)) != len(names):
        raise InvalidInput("a task is listed twice", field="tasks")
    partner = contract.partner_id if contract.proposer_id == me else contract.proposer_id
    found = _tasks_by_name(session, names)
    for i, name in enumerate(data.tasks):
        task = found.get(name)
        if task is None or task.host_id != me:
            raise InvalidInput(f"you do not host a task named {name!r}", field=f"tasks[{i}]")
        if task.pinned:
            raise Conflict(f"task {name} is pinned by an admin", field=f"tasks[{i}]")
        _refuse_second_copy(session, task, partner, f"tasks[{i}]")
    for i, name in enumerate(data.replicas):
        task = found.get(name)
        if task is None or replica_rows.hosted_by(session, task.id, me) is None:
            raise InvalidInput(
                f"you do not host a replica of a task named {name!r}", field=f"replicas[{i}]"
            )
        if task.pinned:
            raise Conflict(f"task {name} is pinned by an admin", field=f"replicas[{i}]")
        if not contract.replica_hosting:
            raise InvalidInput(
                f"contract {contract.id} does not allow replica hosting", field=f"replicas[{i}]"
            )
        _refuse_second_copy(session, task, partner, f"replicas[{i}]")
    # Only once every name is the caller's to offer: the answer tells nothing of others' tasks.
    _refuse_unrunnable(session, found, partner, data)
    outstanding = session.scalar(
        select(Offer).where(Offer.from_id == me, Offer.status == OfferStatus.open)
    )
    if outstanding is not None:
        raise Conflict(
            f"you already have offer {outstanding.id} outstanding; one at a time",
            field="contract_id",
        )
    in_flight = session.scalar(
        select(Movement.id).where(
            Movement.task_id.in_([t.id for t in found.values()]), Movement.status == "prepared"
        )
    )
    if in_flight is not None:
        raise Conflict("a task of this offer is already being moved", field="tasks")
    loads = {name: found[name].load for name in data.tasks}
    for name in data.replicas:
        hosted = replica_rows.hosted_by(session, found[name].id, me)
        assert hosted is not None
        loads[name] = hosted.load
    for name, load in (data.loads or {}).items():
        if name not in loads:
            raise InvalidInput(
                f"a load is given for {name!r}, which is not offered", field=f"loads.{name}"
            )
        if load < 0:
            raise InvalidInput(f"load {load} is negative", field=f"loads.{name}")
        loads[name] = load
    detail: dict[str, Any] = {"loads": loads}
    if data.replicas:
        detail["replica_task_ids"] = [found[n].id for n in data.replicas]
    if data.relay_for is not None:
        detail["relay_chain"] = _check_relay_target(session, me, partner, data.relay_for)
        detail["relay_for"] = data.relay_for
    if data.reservation_price is not None:
        detail["reservation_price"] = data.reservation_price
    offer = Offer(
        contract_id=contract.id,
        from_id=me,
        to_id=partner,
        task_ids=[found[n].id for n in data.tasks],
        accepted_task_ids=[],
        price=data.price,
        status=OfferStatus.open,
        detail=detail,
    )
    session.add(offer)
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action="offer.created",
        entity_type="offer",
        entity_id=offer.id,
        detail={"tasks": data.tasks, "replicas": data.replicas, "price": data.price},
    )
    return offer


def _refuse_unrunnable(
    session: Session, found: dict[str, Task], partner: int, data: OfferCreate
) -> None:
    """A python fragment goes only to a partner whose agent advertised its distribution."""
    listed = [(f"tasks[{i}]", n) for i, n in enumerate(data.tasks)]
    listed += [(f"replicas[{i}]", n) for i, n in enumerate(data.replicas)]
    receiver: Participant | None = None
    for field, name in listed:
        task = found.get(name)
        distribution = runnable.python_distribution(task.work if task is not None else None)
        if distribution is None:
            continue
        receiver = receiver or session.get(Participant, partner)
        assert receiver is not None
        if not runnable.may_run(distribution, receiver.fragments):
            advertised = ", ".join(receiver.fragments or []) or "none"
            raise InvalidInput(
                f"{receiver.name} does not run Python fragments from {distribution} (its agent "
                f"advertises: {advertised}); task {name} cannot be offered to it",
                field=field,
            )


def _refuse_second_copy(session: Session, task: Task, receiver: int, field: str) -> None:
    """The receiver's rule: never two copies of one task on one participant."""
    if replica_rows.holds_copy(session, task, receiver):
        who = participants.names_by_id(session, [receiver])[receiver]
        raise Conflict(
            f"{who} already hosts a copy of task {task.name}; never two copies on one participant",
            field=field,
        )


def _check_relay_target(session: Session, me: int, partner: int, upstream_id: int) -> list[int]:
    """The chain of givers (participant ids, origin first) a relay of ``upstream_id`` to
    ``partner`` extends, after the chain rule of ``protocol.relay_refusal``."""
    upstream = session.get(Offer, upstream_id)
    if upstream is None or upstream.to_id != me:
        raise InvalidInput(f"no offer {upstream_id} addressed to you", field="relay_for")
    if upstream.status is not OfferStatus.open:
        raise Conflict(
            f"offer {upstream_id} is {upstream.status.value}, not open", field="relay_for"
        )
    chain = [*upstream.detail.get("relay_chain", []), upstream.from_id]
    names = participants.names_by_id(session, [*chain, me, partner])
    refusal = protocol.relay_refusal([names[p] for p in chain], names[me], names[partner])
    if refusal is not None:
        if partner in chain:
            raise InvalidInput(refusal, field="relay_for")
        raise Conflict(refusal, field="relay_for")
    return chain


def get_visible(
    session: Session, principal: Principal, offer_id: int, *, for_update: bool = False
) -> Offer:
    query = select(Offer).where(Offer.id == offer_id)
    offer = session.scalar(query.with_for_update() if for_update else query)
    if offer is None or (
        not principal.is_admin and principal.participant_id not in (offer.from_id, offer.to_id)
    ):
        raise NotFound(f"offer {offer_id} not found", field="id")
    return offer


def _decidable(
    session: Session, principal: Principal, offer_id: int, version: int, *, by: str
) -> Offer:
    offer = get_visible(session, principal, offer_id, for_update=True)
    expected = offer.to_id if by == "addressee" else offer.from_id
    if principal.participant_id != expected:
        raise Forbidden(f"only the offer's {by} may do this", field="id")
    if offer.version != version:
        raise Conflict(
            f"stale version: you sent {version}, the offer is at version {offer.version} "
            f"(status {offer.status.value})",
            field="version",
        )
    if offer.status is not OfferStatus.open:
        raise Conflict(f"offer {offer.id} is {offer.status.value}", field="status")
    return offer


def accept(
    session: Session,
    principal: Principal,
    offer_id: int,
    version: int,
    task_names: list[str] | None,
    replica_names: list[str] | None = None,
    reservation_price: float | None = None,
) -> Offer:
    """Take the offered tasks (or the named subset) at the agreed price; see the module doc."""
    offer = _decidable(session, principal, offer_id, version, by="addressee")
    check_not_fenced(session.get(Participant, offer.to_id), acting_as="take tasks")
    offered = {t.id: t for t in session.scalars(select(Task).where(Task.id.in_(offer.task_ids)))}
    replica_ids = list(offer.detail.get("replica_task_ids", []))
    offered_replicas = {
        t.id: t for t in session.scalars(select(Task).where(Task.id.in_(replica_ids)))
    }
    everything = task_names is None and replica_names is None
    chosen = _subset(offer, offered, task_names, everything, "tasks")
    chosen_replicas = _subset(offer, offered_replicas, replica_names, everything, "replicas")
    if not chosen and not chosen_replicas:
        raise InvalidInput("accept at least one task, or reject the offer", field="tasks")
    contract = contracts.get_visible(session, principal, offer.contract_id)
    if contract.status is not ContractStatus.active:
        raise Conflict(f"contract {contract.id} is {contract.status.value}", field="contract_id")
    price = agreed_price(
        offer.price,
        offer.detail.get("reservation_price"),
        reservation_price,
        contract.price_min,
        contract.price_max,
    )
    target = session.get(Participant, offer.to_id)
    assert target is not None
    prepared = [
        movements.prepare(
            session,
            task,
            target,
            # Back to its owner is a move-back: the payment for it stops at the commit.
            reason=MovementReason.move_back
            if task.owner_id == target.id and task.host_id != target.id
            else MovementReason.load,
            actor=principal.actor,
            contract=contract,
            price=price,
            offer_id=offer.id,
        )
        for task in sorted(chosen, key=lambda t: t.name)
    ]
    source = session.get(Participant, offer.from_id)
    assert source is not None
    for i, task in enumerate(sorted(chosen_replicas, key=lambda t: t.name)):
        prepared.append(
            movements.prepare_replica(
                session,
                task,
                source,
                target,
                actor=principal.actor,
                contract=contract,
                price=price,
                offer_id=offer.id,
                field=f"replicas[{i}]",
            )
        )
    offer.accepted_task_ids = [t.id for t in sorted(chosen, key=lambda t: t.name)]
    whole = len(chosen) == len(offered) and len(chosen_replicas) == len(offered_replicas)
    offer.status = OfferStatus.accepted if whole else OfferStatus.partially_accepted
    offer.decided_at = utcnow()
    offer.detail = {
        **offer.detail,
        "movement_ids": [m.id for m in prepared],
        "accepted_replica_task_ids": [t.id for t in sorted(chosen_replicas, key=lambda t: t.name)],
        "agreed_price": price,
        **({} if reservation_price is None else {"taker_reservation_price": reservation_price}),
    }
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action=f"offer.{offer.status.value}",
        entity_type="offer",
        entity_id=offer.id,
        detail={
            "tasks": [t.name for t in chosen],
            "replicas": [t.name for t in chosen_replicas],
            "price": price,
        },
    )
    return offer


def agreed_price(
    offered: float,
    giver_reservation: float | None,
    taker_reservation: float | None,
    price_min: float,
    price_max: float,
) -> float:
    """The price an acceptance moves load at, or a 409 naming ``reservation_price``.

    Both reservations: ``protocol.negotiated_price`` inside the contract's range. Only the
    taker's: the offered price, if it is at least the taker's reservation (the giver named it
    and will pay no more). Neither: the offered price, as before reservations existed.
    """
    if taker_reservation is None:
        return offered
    if giver_reservation is None:
        if taker_reservation > offered:
            raise Conflict(
                f"your reservation_price {taker_reservation} is above the offered price "
                f"{offered}: no deal at this price",
                field="reservation_price",
            )
        return offered
    price = protocol.negotiated_price(
        float(giver_reservation), taker_reservation, price_min, price_max
    )
    if price is not None:
        return price
    if taker_reservation > giver_reservation:
        # The giver's reservation is private: say there is no overlap, not where it ends.
        why = "is above the most the giver will pay"
    else:
        why = (
            "leaves no price both sides accept inside the contract's range "
            f"[{price_min}, {price_max}]"
        )
    raise Conflict(f"your reservation_price {taker_reservation} {why}", field="reservation_price")


def _subset(
    offer: Offer, offered: dict[int, Task], names: list[str] | None, everything: bool, field: str
) -> list[Task]:
    """The offered tasks (or replicas) named in an acceptance; all of them when none is named."""
    if everything:
        return list(offered.values())
    by_name = {t.name: t for t in offered.values()}
    chosen = []
    for i, name in enumerate(names or []):
        if name not in by_name:
            raise InvalidInput(
                f"{field[:-1]} {name!r} is not part of offer {offer.id}", field=f"{field}[{i}]"
            )
        chosen.append(by_name[name])
    return chosen


def reject(session: Session, principal: Principal, offer_id: int, version: int) -> Offer:
    return _close(session, principal, offer_id, version, by="addressee", to=OfferStatus.rejected)


def withdraw(session: Session, principal: Principal, offer_id: int, version: int) -> Offer:
    return _close(session, principal, offer_id, version, by="sender", to=OfferStatus.withdrawn)


def _close(
    session: Session,
    principal: Principal,
    offer_id: int,
    version: int,
    *,
    by: str,
    to: OfferStatus,
) -> Offer:
    """End an open offer without moving anything: refused by its addressee or withdrawn."""
    offer = _decidable(session, principal, offer_id, version, by=by)
    offer.status, offer.decided_at = to, utcnow()
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action=f"offer.{to.value}",
        entity_type="offer",
        entity_id=offer.id,
    )
    return offer


def list_for(
    session: Session,
    principal: Principal,
    status: OfferStatus | None,
    *,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[Row[Any]]:
    """Offers the caller made or received (all for an admin) by id, a page from ``after_id``,
    as rows of the offers table to answer with (``to_read``): loading ORM objects that are
    only read once cost more CPU than the statement (``bench/api/README.md``)."""
    party = principal.participant_id
    query = _page(party is not None, status is not None, after_id is not None, limit is not None)
    values = {"party": party, "status": status, "after_id": after_id, "limit": limit}
    return list(session.execute(query, {k: v for k, v in values.items() if v is not None}))


_OFFERS = cast(Table, Offer.__table__)


@functools.cache
def _page(of_party: bool, by_status: bool, after: bool, limited: bool) -> Select[Any]:
    """The page query for one combination of filters, built the first time it is asked for:
    every list of offers runs one, and building it cost more CPU than running it."""
    query = select(_OFFERS)
    columns = _OFFERS.c
    if of_party:
        query = query.where(
            or_(columns.from_id == bindparam("party"), columns.to_id == bindparam("party"))
        )
    if by_status:
        query = query.where(columns.status == bindparam("status"))
    if after:  # keyset: the rows after the last one the client saw (app/db/keyset.py)
        query = query.where(columns.id > bindparam("after_id"))
    query = query.order_by(columns.id)
    return query.limit(bindparam("limit")) if limited else query


# An offer to answer with: the ORM object, or a row of the offers table (``list_for``).
OfferView = Offer | Row[Any]


def to_read(session: Session, offers: Sequence[OfferView]) -> list[OfferRead]:
    task_ids = {tid for o in offers for tid in o.task_ids}
    task_ids |= {tid for o in offers for tid in o.detail.get("replica_task_ids", [])}
    names: dict[int, str] = {}
    if task_ids:  # an empty page needs no query (every list of offers answers one page)
        rows = session.execute(select(Task.id, Task.name).where(Task.id.in_(task_ids)))
        names = {task_id: name for task_id, name in rows}
    people = participants.names_by_id(
        session,
        [o.from_id for o in offers]
        + [o.to_id for o in offers]
        + [p for o in offers for p in o.detail.get("relay_chain", [])],
    )
    return [
        OfferRead(
            id=o.id,
            contract_id=o.contract_id,
            src=people[o.from_id],
            to=people[o.to_id],
            tasks=[names[t] for t in o.task_ids],
            replicas=[names[t] for t in o.detail.get("replica_task_ids", [])],
            loads={k: float(v) for k, v in o.detail.get("loads", {}).items()},
            accepted_tasks=[names[t] for t in o.accepted_task_ids],
            accepted_replicas=[names[t] for t in o.detail.get("accepted_replica_task_ids", [])],
            price=o.price,
            agreed_price=_agreed(o),
            status=o.status,
            version=o.version,
            movement_ids=list(o.detail.get("movement_ids", [])),
            relay_for=o.detail.get("relay_for"),
            relay_chain=[people[p] for p in o.detail.get("relay_chain", [])],
            created_at=o.created_at,
            decided_at=o.decided_at,
        )
        for o in offers
    ]


def _agreed(offer: OfferView) -> float | None:
    """The price the offer's accepted tasks moved at (offers accepted before reservations
    existed recorded none: theirs was the offered price)."""
    if offer.status not in (OfferStatus.accepted, OfferStatus.partially_accepted):
        return None
    agreed = offer.detail.get("agreed_price")
    return float(agreed) if agreed is not None else offer.price
