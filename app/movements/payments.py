"""Payments accrue per unit load per second on every paid hop of a task's journey."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from app.models import (
    MARKET_REASONS,
    LedgerEntry,
    Movement,
    MovementStatus,
    Replica,
    Task,
)
from app.movements import replicas, repository
from app.movements.hops import CommittedMove, active_hops
from app.movements.ledger import charge_hops
from app.movements.replicas import REPLICA_KIND


def _accrued_from(session: Session, task: Task) -> datetime | None:
    moves = repository.committed_for_task(session, task.id)
    if not moves:
        return None
    last_move = moves[-1].finished_at
    # The primary's own charges only: a replica of the task is charged on its own clock
    # (``replicas.accrued_at``), and its entries must not hide an uncharged primary interval.
    last_entry = session.scalar(
        select(func.max(LedgerEntry.at)).where(
            LedgerEntry.task_id == task.id, LedgerEntry.kind != REPLICA_KIND
        )
    )
    candidates = [t for t in (last_move, last_entry) if t is not None]
    return max(candidates) if candidates else None


def accrue_task(session: Session, task: Task, now: datetime) -> float:
    """Charge every paid hop of ``task`` for the time since the last charge; returns the total.

    Called before every change of hops (a committed move, a termination) and on heartbeats, so
    each interval is charged once at the hops that held during it.
    """
    start = _accrued_from(session, task)
    if start is None or now <= start:
        return 0.0
    moves = [
        CommittedMove(
            src=m.from_id,
            dst=m.to_id,
            contract_id=m.contract_id,
            price=m.price,
            direct=m.reason not in MARKET_REASONS,
        )
        for m in repository.committed_for_task(session, task.id)
    ]
    total = charge_hops(
        session,
        active_hops(task.owner_id, moves),
        load=task.load,
        seconds=(now - start).total_seconds(),
        task_id=task.id,
        now=now,
    )
    session.flush()
    return total


# Built once: every termination runs both (building them cost more CPU than running them).
_MOVED_UNDER = (
    select(Movement.task_id)
    .where(
        Movement.contract_id == bindparam("contract_id"),
        Movement.status == MovementStatus.committed,
    )
    .distinct()
)
_REPLICAS = select(Replica).order_by(Replica.id)


def accrue_contract(session: Session, contract_id: int, now: datetime) -> None:
    """Bring the ledger of contract ``contract_id`` up to ``now`` (before it is terminated and
    settled)."""
    task_ids = session.scalars(_MOVED_UNDER, {"contract_id": contract_id})
    for task_id in sorted(task_ids):
        task = session.get(Task, task_id)
        if task is not None:
            accrue_task(session, task, now)
    for replica in session.scalars(_REPLICAS):
        task = session.get(Task, replica.task_id)
        hops = replicas.paid_hops(replica, task.owner_id) if task is not None else []
        if any(hop.contract_id == contract_id for hop in hops):
            replicas.accrue(session, replica, now)


def accrue_participant(session: Session, participant_id: int, now: datetime) -> float:
    """Bring up to ``now`` the payments a participant's heartbeat vouches for; returns the total.

    The tasks it owns and has shed (it pays for them), and every replica it owns or hosts: a
    replica's load is paid like any other load, and its host's heartbeat keeps the payments
    current when the owner's side is what failed (which is when a replica matters).
    """
    total = 0.0
    for task in session.scalars(
        select(Task)
        .where(Task.owner_id == participant_id, Task.host_id != participant_id)
        .order_by(Task.id)
    ):
        total += accrue_task(session, task, now)
    owned = select(Task.id).where(Task.owner_id == participant_id)
    # Locked, in id order: the owner's and the host's heartbeats may charge one replica at the
    # same moment; the second then reads the first's ``accrued_at`` instead of charging the
    # same interval again (or failing on the replica's version).
    for replica in session.scalars(
        select(Replica)
        .where((Replica.participant_id == participant_id) | Replica.task_id.in_(owned))
        .order_by(Replica.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ):
        total += replicas.accrue(session, replica, now)
    session.flush()
    return total
