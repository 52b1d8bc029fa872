"""Replicas of tasks: placement as priced load, DPC state reports, payments.

Placement is decided by the pure engine (``app.availability.place_replicas``); this module only
translates rows in and out. A replica's load is paid like any other hosted load: the owner pays
the host under their contract, per unit load per second, at the contract's minimum price (the
replica is requested, not negotiated offer by offer; the minimum is what the host accepted).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.availability import PlacementError, ReplicaCandidate, place_replicas
from app.db import keyset
from app.db.base import utcnow
from app.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.models import Contract, ContractStatus, Participant, Replica, ReplicaTechnique, Task
from app.movements.hops import CommittedMove, Hop, after_move
from app.movements.ledger import charge_hops
from app.movements.replica_schemas import ReplicaRead
from app.participants.failures import check_not_fenced

# The ledger kind of a replica's payments (a primary's are "accrual").
REPLICA_KIND = "replica"


def _no_task(name: str) -> str:
    return f"no task named {name!r}"


def _task(session: Session, name: str) -> Task:
    task = session.scalar(select(Task).where(Task.name == name))
    if task is None:
        raise NotFound(_no_task(name), field="task")
    return task


def _hosted_load(session: Session, participant_id: int) -> float:
    tasks = session.scalar(
        select(func.coalesce(func.sum(Task.load), 0.0)).where(Task.host_id == participant_id)
    )
    replicas = session.scalar(
        select(func.coalesce(func.sum(Replica.load), 0.0)).where(
            Replica.participant_id == participant_id
        )
    )
    return float(tasks or 0.0) + float(replicas or 0.0)


def _active_contracts(session: Session, owner_id: int) -> dict[int, Contract]:
    """The owner's active contracts, by partner id."""
    rows = session.scalars(
        select(Contract).where(
            (Contract.proposer_id == owner_id) | (Contract.partner_id == owner_id),
            Contract.status == ContractStatus.active,
        )
    )
    out: dict[int, Contract] = {}
    for contract in rows:
        partner = contract.partner_id if contract.proposer_id == owner_id else contract.proposer_id
        out[partner] = contract
    return out


def place(
    session: Session,
    principal: Principal,
    task_name: str,
    k: int,
    technique: ReplicaTechnique,
) -> list[Replica]:
    """Give the task ``k`` replicas in total on eligible partners; returns the new ones."""
    task = _task(session, task_name)
    me = principal.participant_id
    if not principal.is_admin and me != task.owner_id:
        if me is not None and (me == task.host_id or hosted_by(session, task.id, me) is not None):
            raise Forbidden(f"only the owner of {task_name!r} places its replicas", field="task")
        # Anyone without a copy of the task learns nothing: 404, as for an unknown name.
        raise NotFound(_no_task(task_name), field="task")
    existing = list(session.scalars(select(Replica).where(Replica.task_id == task.id)))
    by_partner = _active_contracts(session, task.owner_id)
    people = {p.id: p for p in session.scalars(select(Participant))}
    candidates = [
        ReplicaCandidate(
            participant=people[pid].name,
            hosts_replicas=contract.replica_hosting,
            load=_hosted_load(session, pid),
            capacity=people[pid].capacity,
            price=contract.price_min,
        )
        for pid, contract in sorted(by_partner.items())
    ]
    try:
        placement = place_replicas(
            task.name,
            task_load=task.load,
            k=k,
            primary_host=people[task.host_id].name,
            candidates=candidates,
            existing=[people[r.participant_id].name for r in existing],
        )
    except PlacementError as error:
        raise Conflict(str(error), field="k") from error
    ids = {p.name: p.id for p in people.values()}
    created = []
    now = utcnow()
    for host in placement.hosts:
        contract = by_partner[ids[host]]
        replica = Replica(
            task_id=task.id,
            participant_id=ids[host],
            contract_id=contract.id,
            technique=technique,
            load=task.load,
            price=contract.price_min,
            state="STABLE",
            state_at=now,
            accrued_at=now,
        )
        session.add(replica)
        created.append(replica)
    session.flush()
    for replica in created:
        audit.record(
            session,
            actor=principal.actor,
            action="replica.placed",
            entity_type="task",
            entity_id=task.id,
            detail={"host": people[replica.participant_id].name, "technique": technique.value},
        )
    return created


def paid_hops(replica: Replica, owner_id: int) -> list[Hop]:
    """Who pays whom for the replica: its placement, then every move the market made of it."""
    if replica.hops is not None:
        return [Hop(**hop) for hop in replica.hops]
    if replica.contract_id is None or replica.price is None:
        return []
    return [Hop(owner_id, replica.participant_id, replica.contract_id, replica.price)]


def accrue(session: Session, replica: Replica, now: datetime) -> float:
    """Charge every paid hop of the replica's load since the last charge (0 without one)."""
    seconds = (now - replica.accrued_at).total_seconds()
    if seconds <= 0:
        return 0.0  # never move the clock back: an interval would be charged twice
    task = session.get(Task, replica.task_id)
    replica.accrued_at = now
    if task is None:
        return 0.0
    return charge_hops(
        session,
        paid_hops(replica, task.owner_id),
        load=replica.load,
        seconds=seconds,
        task_id=task.id,
        now=now,
        kind=REPLICA_KIND,
    )


def hosted_by(session: Session, task_id: int, participant_id: int) -> Replica | None:
    return session.scalar(
        select(Replica).where(Replica.task_id == task_id, Replica.participant_id == participant_id)
    )


def holds_copy(session: Session, task: Task, participant_id: int) -> bool:
    """Whether the participant hosts the task or one of its replicas."""
    return task.host_id == participant_id or hosted_by(session, task.id, participant_id) is not None


def moved(
    session: Session,
    replica: Replica,
    task: Task,
    *,
    to_id: int,
    contract_id: int | None,
    price: float | None,
    load: float | None,
    now: datetime,
) -> None:
    """The market moved the replica: paid up to now on its old hops, then hosted at ``to_id``
    with the move's hop added (or the chain unwound, for a move back), as a primary's."""
    accrue(session, replica, now)
    move = CommittedMove(replica.participant_id, to_id, contract_id, price)
    chain = after_move(task.owner_id, paid_hops(replica, task.owner_id), move)
    replica.hops = [
        {"payer": h.payer, "payee": h.payee, "contract_id": h.contract_id, "price": h.price}
        for h in chain
    ]
    replica.participant_id = to_id
    replica.contract_id = chain[-1].contract_id if chain else None
    replica.price = chain[-1].price if chain else None
    if load is not None:
        replica.load = load  # from now on it is paid for the load that was sold
    session.flush()


def promoted(session: Session, task_id: int, participant_id: int, now: datetime) -> None:
    """A failover made this replica's host the task's host: it stops being a replica (paid up
    to now as one; from now on the task's own hosting terms apply)."""
    replica = session.scalar(
        select(Replica).where(Replica.task_id == task_id, Replica.participant_id == participant_id)
    )
    if replica is None:
        return
    accrue(session, replica, now)
    session.delete(replica)
    session.flush()


def report_state(
    session: Session, principal: Principal, task_name: str, state: str, epoch: int | None = None
) -> Replica:
    """The hosting participant reports its replica's DPC state (and is paid up to now).

    With ``epoch``, a report from an older incarnation of the replica (the participant hosted
    it before a move away and back) is refused, as an old primary host's writes are.
    """
    if principal.participant_id is None:
        raise InvalidInput("only the hosting participant reports a replica's state", field="state")
    task = _task(session, task_name)
    replica = session.scalar(
        select(Replica).where(
            Replica.task_id == task.id, Replica.participant_id == principal.participant_id
        )
    )
    if replica is None:
        # The same answer as for an unknown name: a task is nobody else's business.
        raise NotFound(_no_task(task_name), field="task")
    check_not_fenced(session.get(Participant, replica.participant_id), acting_as="report")
    if epoch is not None and epoch != replica.lease_epoch:
        what = "stale" if epoch < replica.lease_epoch else "unknown"
        raise Conflict(
            f"{what} replica epoch {epoch}: the replica of {task_name!r} is at epoch "
            f"{replica.lease_epoch}",
            field="epoch",
        )
    now = utcnow()
    accrue(session, replica, now)
    if replica.state != state:
        audit.record(
            session,
            actor=principal.actor,
            action="replica.state",
            entity_type="task",
            entity_id=task.id,
            detail={"from": replica.state, "to": state},
        )
        replica.state = state
        replica.state_at = now
    session.flush()
    return replica


def visible(
    session: Session,
    principal: Principal,
    *,
    after: tuple[int, int] | None = None,
    limit: int | None = None,
) -> list[Replica]:
    """Every replica for an admin; for a participant, those it hosts and those of the tasks
    it owns or hosts (the primary's host ships checkpoints to its passive standbys); by task
    then id, a page after the key ``after`` when given."""
    query = keyset.after(select(Replica), [Replica.task_id, Replica.id], after)
    query = query.order_by(Replica.task_id, Replica.id).limit(limit)
    if principal.participant_id is not None:
        me = principal.participant_id
        mine = select(Task.id).where((Task.owner_id == me) | (Task.host_id == me))
        query = query.where((Replica.participant_id == me) | Replica.task_id.in_(mine))
    return list(session.scalars(query))


def to_read(session: Session, replicas: list[Replica]) -> list[ReplicaRead]:
    # Only the rows' hosts and tasks, not every participant and task in the registry.
    people = {
        p.id: p
        for p in session.scalars(
            select(Participant).where(Participant.id.in_({r.participant_id for r in replicas}))
        )
    }
    tasks = dict(
        session.execute(
            select(Task.id, Task.name).where(Task.id.in_({r.task_id for r in replicas}))
        ).all()
    )
    out = []
    for r in replicas:
        host = people[r.participant_id]
        out.append(
            ReplicaRead(
                id=r.id,
                task=tasks[r.task_id],
                host=host.name,
                technique=r.technique,
                load=r.load,
                price=r.price,
                contract_id=r.contract_id,
                epoch=r.lease_epoch,
                state="FAILED" if host.liveness == "failed" else r.state,
                reported_state=r.state,
                host_liveness=host.liveness,
                state_at=r.state_at,
            )
        )
    return out
