"""Charging a copy's paid hops: one ledger entry per hop under an active contract.

The one place where load hosted over a chain of hops becomes payments, for a primary
(``payments.accrue_task``) and for a replica (``replicas.accrue``) alike: a replica's load is
paid like any other load (issue 5, item 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy.orm import Session

from app.contracts import service as contracts
from app.models import Contract, ContractStatus
from app.movements.hops import Hop


def charge_hops(
    session: Session,
    hops: Iterable[Hop],
    *,
    load: float,
    seconds: float,
    task_id: int,
    now: datetime,
    kind: str = "accrual",
) -> float:
    """Charge ``load`` for ``seconds`` on every hop whose contract is active; returns the total.

    A hop whose contract ended (terminated, settled) is paid no more: its final settlement
    already counted what it earned. Entries are dated ``now``, the instant paid up to.
    """
    if load <= 0 or seconds <= 0:
        return 0.0
    total = 0.0
    for hop in hops:
        contract = session.get(Contract, hop.contract_id) if hop.contract_id else None
        if contract is None or contract.status is not ContractStatus.active:
            continue
        entry = contracts.accrue(
            session,
            contract,
            payer_id=hop.payer,
            payee_id=hop.payee,
            load=load,
            price=hop.price,
            seconds=seconds,
            task_id=task_id,
        )
        entry.kind = kind
        entry.at = now
        total += entry.amount
    return total
