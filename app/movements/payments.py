"""Payments accrue per unit load per second on every paid hop of a task's journey."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.contracts import service as contracts
from app.models import (
    Contract,
    ContractStatus,
    LedgerEntry,
    Movement,
    MovementStatus,
    Replica,
    Task,
)
from app.movements import replicas, repository
from app.movements.hops import CommittedMove, active_hops


def _accrued_from(session: Session, task: Task) -> datetime | None:
    moves = repository.committed_for_task(session, task.id)
    if not moves:
        return None
    last_move = moves[-1].finished_at
    last_entry = session.scalar(
        select(func.max(LedgerEntry.at)).where(LedgerEntry.task_id == task.id)
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
    seconds = (now - start).total_seconds()
    moves = [
        CommittedMove(src=m.from_id, dst=m.to_id, contract_id=m.contract_id, price=m.price)
        for m in repository.committed_for_task(session, task.id)
    ]
    total = 0.0
    for hop in active_hops(task.owner_id, moves):
        contract = session.get(Contract, hop.contract_id) if hop.contract_id else None
        if contract is None or contract.status is not ContractStatus.active or task.load <= 0:
            continue
        entry = contracts.accrue(
            session,
            contract,
            payer_id=hop.payer,
            payee_id=hop.payee,
            load=task.load,
            price=hop.price,
            seconds=seconds,
            task_id=task.id,
        )
        entry.at = now
        total += entry.amount
    session.flush()
    return total


def accrue_contract(session: Session, contract: Contract, now: datetime) -> None:
    """Bring the ledger of ``contract`` up to ``now`` (before it is terminated and settled)."""
    task_ids = session.scalars(
        select(Movement.task_id)
        .where(Movement.contract_id == contract.id, Movement.status == MovementStatus.committed)
        .distinct()
    )
    for task_id in sorted(task_ids):
        task = session.get(Task, task_id)
        if task is not None:
            accrue_task(session, task, now)
    for replica in session.scalars(select(Replica).order_by(Replica.id)):
        task = session.get(Task, replica.task_id)
        hops = replicas.paid_hops(replica, task.owner_id) if task is not None else []
        if any(hop.contract_id == contract.id for hop in hops):
            replicas.accrue(session, replica, now)
