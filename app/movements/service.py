"""Two-phase movements: prepare, then commit (by the new host) or abort.

The registry's ``tasks.host_id`` names exactly one host at every instant: prepare changes
nothing about hosting, commit switches the host and raises the task's lease epoch in one
transaction. The epoch fences the old host, whose writes carry an older epoch and are refused.
A prepared movement whose commit never comes (a crash in between) is aborted by
``abort_stale`` once its lease (``Settings.movement_lease_seconds``) is over, leaving the task
with its old host; the service runs it in the background (``app.movements.sweeper``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.db.base import utcnow
from app.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.models import (
    MARKET_REASONS,
    Contract,
    ContractStatus,
    Movement,
    MovementReason,
    MovementStatus,
    Offer,
    Participant,
    ParticipantStatus,
    Task,
)
from app.movements import replicas, repository
from app.movements.payments import accrue_task
from app.movements.schemas import MovementRead
from app.participants import repository as participants
from app.participants.failures import check_not_fenced

MARKET = MARKET_REASONS
# Relocations that hand the task to the copy that already runs beside it (active standby) or
# restores it (passive standby, upstream backup): asked for by that copy's host, and only once
# the registry sees the current host failed.
TAKEOVERS = (MovementReason.failover, MovementReason.replica_switch)


def _lock_for_move(session: Session, task: Task, *, market: bool, field: str) -> Task:
    """The task's row, locked for the rest of the transaction (every decision about one task is
    serialised: at most one movement in flight, whatever the copy), once it may move now."""
    locked = repository.task_for_update(session, task.id)
    assert locked is not None  # the caller holds the task, read in this transaction
    if market and locked.pinned:
        raise Conflict(
            f"task {task.name} is pinned by an admin; the market may not move it", field=field
        )
    if repository.prepared_for_task(session, task.id) is not None:
        raise Conflict(f"task {task.name} is already being moved", field=field)
    return locked


def _check_not_suspended(target: Participant) -> None:
    if target.status is ParticipantStatus.suspended:
        raise Conflict(f"{target.name} is suspended and may not take tasks", field="to")


def _sold_load(session: Session, movement: Movement, task: Task) -> float | None:
    """The load the offer behind ``movement`` sold of ``task`` (as the offer measured it), which
    payments charge from the commit on; None outside an offer or when it named none."""
    if movement.offer_id is None:
        return None
    offer = session.get(Offer, movement.offer_id)
    sold = offer.detail.get("loads", {}).get(task.name) if offer is not None else None
    return float(sold) if sold is not None else None


def _prepared(
    session: Session, principal: Principal, movement_id: int, *, receiver_only: bool = False
) -> Movement:
    """The movement, locked, visible to ``principal`` (404 otherwise), to be decided by its
    receiver when ``receiver_only`` (403), and still prepared (409)."""
    movement = _visible(session, principal, movement_id, for_update=True)
    if receiver_only and not principal.is_admin and principal.participant_id != movement.to_id:
        raise Forbidden("only the receiving participant commits a movement", field="id")
    if movement.status is not MovementStatus.prepared:
        raise Conflict(f"movement {movement.id} is {movement.status.value}", field="status")
    return movement


def prepare(
    session: Session,
    task: Task,
    target: Participant,
    *,
    reason: MovementReason,
    actor: str,
    contract: Contract | None = None,
    price: float | None = None,
    offer_id: int | None = None,
    technique: str | None = None,
) -> Movement:
    """``technique``: for a takeover, how the replica taking over restores the task (kept in
    the audit entry: the replica record itself becomes the task at the commit)."""
    market = reason in MARKET
    locked = _lock_for_move(session, task, market=market, field="tasks")
    if target.id == locked.host_id:
        raise InvalidInput(f"{target.name} already hosts task {task.name}", field="to")
    _check_not_suspended(target)
    if reason not in TAKEOVERS and replicas.hosted_by(session, task.id, target.id) is not None:
        # A failover onto the replica is how a replica becomes the primary; nothing else ever
        # puts the primary beside a replica.
        raise Conflict(
            f"{target.name} already hosts a replica of task {task.name}; never two copies on "
            "one participant",
            field="tasks",
        )
    movement = Movement(
        task_id=task.id,
        from_id=locked.host_id,
        to_id=target.id,
        contract_id=contract.id if contract else None,
        offer_id=offer_id,
        reason=reason,
        status=MovementStatus.prepared,
        price=price,
        epoch=locked.lease_epoch + 1,
    )
    session.add(movement)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="movement.prepared",
        entity_type="movement",
        entity_id=movement.id,
        detail={
            "task": task.name,
            "to": target.name,
            "reason": reason.value,
            "epoch": movement.epoch,
            **({"technique": technique} if technique else {}),
        },
    )
    return movement


def prepare_replica(
    session: Session,
    task: Task,
    source: Participant,
    target: Participant,
    *,
    actor: str,
    contract: Contract,
    price: float,
    offer_id: int,
    field: str = "replicas",
) -> Movement:
    """Prepare the market's move of the replica ``source`` hosts to ``target``.

    Serialised with every other decision about the task (its row lock, one movement in flight
    per task whatever the copy), so the check that ``target`` hosts no copy yet still holds
    at commit. The replica has a fencing token of its own (``replicas.lease_epoch``): the move
    holds the next one, and its commit raises it, so the host it leaves is fenced as an old
    primary host is by the task's epoch.
    """
    locked = _lock_for_move(session, task, market=True, field=field)
    replica = replicas.hosted_by(session, task.id, source.id)
    if replica is None:
        raise Conflict(f"{source.name} no longer hosts a replica of {task.name}", field=field)
    if replicas.holds_copy(session, locked, target.id):
        raise Conflict(
            f"{target.name} already hosts a copy of task {task.name}; never two on one participant",
            field=field,
        )
    _check_not_suspended(target)
    movement = Movement(
        task_id=task.id,
        from_id=source.id,
        to_id=target.id,
        contract_id=contract.id,
        offer_id=offer_id,
        reason=MovementReason.load,
        status=MovementStatus.prepared,
        price=price,
        epoch=replica.lease_epoch + 1,
        replica=True,
    )
    session.add(movement)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="movement.prepared",
        entity_type="movement",
        entity_id=movement.id,
        detail={
            "task": task.name,
            "replica": True,
            "to": target.name,
            "reason": "load",
            "epoch": movement.epoch,
        },
    )
    return movement


def _commit_replica(session: Session, movement: Movement, task: Task) -> None:
    replica = replicas.hosted_by(session, task.id, movement.from_id)
    if replica is None:
        raise Conflict(
            f"the replica of {task.name} left its host since this movement was prepared",
            field="id",
        )
    if replica.lease_epoch != movement.epoch - 1:
        raise Conflict(
            f"the replica of {task.name} moved since this movement was prepared (its epoch is "
            f"{replica.lease_epoch}, the movement expected {movement.epoch - 1})",
            field="id",
        )
    if replicas.holds_copy(session, task, movement.to_id):
        raise Conflict(
            f"the target already hosts a copy of task {task.name}; never two on one participant",
            field="id",
        )
    now = utcnow()
    replicas.moved(
        session,
        replica,
        task,
        to_id=movement.to_id,
        contract_id=movement.contract_id,
        price=movement.price,
        load=_sold_load(session, movement, task),
        now=now,
    )
    replica.lease_epoch = movement.epoch
    movement.status, movement.finished_at = MovementStatus.committed, now
    session.flush()


def _visible(
    session: Session, principal: Principal, movement_id: int, *, for_update: bool = False
) -> Movement:
    movement = repository.get(session, movement_id, for_update=for_update)
    if movement is None or (
        not principal.is_admin
        and principal.participant_id not in (movement.from_id, movement.to_id)
    ):
        raise NotFound(f"movement {movement_id} not found", field="id")
    return movement


def commit(session: Session, principal: Principal, movement_id: int, epoch: int) -> Movement:
    """The new host reports that it has resumed the task: it becomes the host of record."""
    movement = _prepared(session, principal, movement_id, receiver_only=True)
    check_not_fenced(session.get(Participant, movement.to_id), acting_as="commit a movement")
    if epoch != movement.epoch:
        raise Conflict(
            f"stale epoch {epoch}: this movement holds epoch {movement.epoch}", field="epoch"
        )
    task = repository.task_for_update(session, movement.task_id)
    assert task is not None
    if movement.replica:
        _commit_replica(session, movement, task)
        detail: dict[str, object] = {"task": task.name, "replica": True}
    else:
        _commit_primary(session, movement, task)
        detail = {"task": task.name}
    audit.record(
        session,
        actor=principal.actor,
        action="movement.committed",
        entity_type="movement",
        entity_id=movement.id,
        detail={**detail, "epoch": movement.epoch},
    )
    return movement


def _commit_primary(session: Session, movement: Movement, task: Task) -> None:
    if task.host_id != movement.from_id or task.lease_epoch != movement.epoch - 1:
        raise Conflict(
            f"task {task.name} changed host since this movement was prepared", field="id"
        )
    if (
        movement.reason not in TAKEOVERS
        and replicas.hosted_by(session, task.id, movement.to_id) is not None
    ):
        raise Conflict(
            f"the target already hosts a replica of task {task.name}; never two copies on one "
            "participant",
            field="id",
        )
    now = utcnow()
    accrue_task(session, task, now)
    sold = _sold_load(session, movement, task)
    if sold is not None:
        task.load = sold  # payments from now on are for the load that was sold
    task.host_id = movement.to_id
    task.lease_epoch = movement.epoch
    task.host_since = now
    task.contract_id = movement.contract_id if movement.to_id != task.owner_id else None
    task.price = movement.price if movement.to_id != task.owner_id else None
    movement.status, movement.finished_at = MovementStatus.committed, now
    session.flush()
    if movement.reason in TAKEOVERS:
        # The replica that took over is the task's host now, no longer a replica of it.
        replicas.promoted(session, task.id, movement.to_id, now)


def abort(
    session: Session, principal: Principal, movement_id: int, *, why: str = "aborted"
) -> Movement:
    movement = _prepared(session, principal, movement_id)
    movement.status, movement.finished_at = MovementStatus.aborted, utcnow()
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action="movement.aborted",
        entity_type="movement",
        entity_id=movement.id,
        detail={"why": why},
    )
    return movement


def get_visible(session: Session, principal: Principal, movement_id: int) -> Movement:
    """One movement, for its source, its target and admins; 404 for anyone else."""
    return _visible(session, principal, movement_id)


def abort_stale(session: Session, *, lease_seconds: float, now: datetime | None = None) -> int:
    """Abort prepared movements older than their lease: the target never committed (it
    crashed, or lost the source), so each task keeps its old host and may be moved again.

    The rows are locked (and rows another transaction holds are skipped, for the next round),
    so a commit that lands at the same moment wins or loses whole, never half.
    """
    now = now or utcnow()
    stale = repository.stale_prepared(session, now - timedelta(seconds=lease_seconds))
    for movement in stale:
        movement.status, movement.finished_at = MovementStatus.aborted, now
        audit.record(
            session,
            actor="system",
            action="movement.aborted",
            entity_type="movement",
            entity_id=movement.id,
            detail={"why": "prepare timed out", "lease_seconds": lease_seconds},
        )
    session.flush()
    return len(stale)


def request(
    session: Session,
    principal: Principal,
    task_name: str,
    to: str,
    reason: MovementReason,
) -> Movement:
    """A relocation outside the market (failover, replica switch, reconciliation).

    Whoever cannot see the task (its owner, host and replica hosts see it) gets 404, as for an
    unknown name. The target is the owner or a partner under an active contract with the
    owner, for every reason: the owner pays it directly under that contract from the commit on.
    A failover or replica switch is asked for by the target itself, which must host a replica
    (or standby) of the task, and only while the registry sees the current host failed; a
    reconciliation by the owner. An admin may ask on anyone's behalf, under the same rules for
    the target and the host. Every refusal writes nothing.
    """
    from app.tasks import repository as tasks_repo

    if reason in MARKET:
        raise InvalidInput("load moves go through offers: POST /v1/offers", field="reason")
    task = tasks_repo.get_by_name(session, task_name)
    if task is None or not _sees_task(session, principal, task):
        raise NotFound(f"task {task_name!r} not found", field="task")
    target = participants.get_by_name(session, to)
    if target is None:
        raise InvalidInput(f"unknown participant {to!r}", field="to")
    check_not_fenced(target, acting_as="take a task over")
    if reason in TAKEOVERS:
        _check_takeover(session, principal, task, target, reason)
    elif not principal.is_admin and principal.participant_id != task.owner_id:
        raise Forbidden(
            f"only the owner of task {task.name} relocates it for {reason.value}", field="reason"
        )
    contract = owner_contract(session, task, target)
    if contract is None and target.id != task.owner_id:
        owner = participants.names_by_id(session, [task.owner_id])[task.owner_id]
        raise Forbidden(
            f"{target.name} has no active contract with {owner}, the owner of task {task.name}: "
            "outside the market a task moves only to its owner or one of its owner's partners",
            field="to",
        )
    standby = replicas.hosted_by(session, task.id, target.id) if reason in TAKEOVERS else None
    return prepare(
        session,
        task,
        target,
        reason=reason,
        actor=principal.actor,
        contract=contract,
        price=contract.price_min if contract is not None else None,
        technique=standby.technique.value if standby is not None else None,
    )


def _sees_task(session: Session, principal: Principal, task: Task) -> bool:
    me = principal.participant_id
    return (
        principal.is_admin
        or me in (task.owner_id, task.host_id)
        or (me is not None and replicas.hosted_by(session, task.id, me) is not None)
    )


def _check_takeover(
    session: Session,
    principal: Principal,
    task: Task,
    target: Participant,
    reason: MovementReason,
) -> None:
    """Only the replica's own host takes it over, and only from a host the registry sees failed:
    a partner with a replica-hosting contract but no copy, or a replica host while the host is
    alive, would otherwise take the task (issue 15, "A partner can take over"). Failed means
    declared so by the registry's failure sweeper (app.participants.failures), nothing less."""
    if not principal.is_admin and principal.participant_id != target.id:
        raise Forbidden(
            f"a {reason.value} is asked for by the participant taking the task over (the host "
            f"of its replica or standby), not by {principal.name}",
            field="to",
        )
    if replicas.hosted_by(session, task.id, target.id) is None:
        raise Forbidden(
            f"{target.name} hosts no replica or standby of task {task.name}: a {reason.value} "
            "hands the task only to one of its replicas",
            field="to",
        )
    host = session.get(Participant, task.host_id)
    assert host is not None  # a task's host is a foreign key
    if host.failed_at is None:
        raise Conflict(
            f"the registry sees {host.name}, the host of task {task.name}, as {host.liveness}, "
            f"not failed: a {reason.value} takes a task only from a failed host",
            field="reason",
        )


def owner_contract(session: Session, task: Task, target: Participant) -> Contract | None:
    """The active contract, in its term, between the task's owner and ``target``."""
    from app.contracts import repository as contracts_repo

    contract = contracts_repo.live_between(session, task.owner_id, target.id)
    if (
        contract is None
        or contract.status is not ContractStatus.active
        or not contract.starts_at <= utcnow() < contract.ends_at
    ):
        return None
    return contract


def to_read(
    session: Session, movements: list[Movement], *, lease_seconds: float | None = None
) -> list[MovementRead]:
    """``lease_seconds``: the registry's movement lease, to tell movers how long a prepared
    movement has left (``lease_seconds_left``; None: not said)."""
    now = utcnow()
    names = participants.names_by_id(
        session, [m.from_id for m in movements] + [m.to_id for m in movements]
    )
    task_names = dict(
        session.execute(
            select(Task.id, Task.name).where(Task.id.in_({m.task_id for m in movements}))
        ).all()
    )
    return [
        MovementRead(
            id=m.id,
            task=task_names[m.task_id],
            src=names[m.from_id],
            to=names[m.to_id],
            reason=m.reason,
            status=m.status,
            contract_id=m.contract_id,
            offer_id=m.offer_id,
            price=m.price,
            epoch=m.epoch,
            replica=m.replica,
            prepared_at=m.prepared_at,
            finished_at=m.finished_at,
            lease_seconds_left=_lease_left(m, lease_seconds, now),
        )
        for m in movements
    ]


def _lease_left(movement: Movement, lease_seconds: float | None, now: datetime) -> float | None:
    if lease_seconds is None or movement.status is not MovementStatus.prepared:
        return None
    held = (now - movement.prepared_at).total_seconds()
    return round(max(0.0, lease_seconds - held), 3)
