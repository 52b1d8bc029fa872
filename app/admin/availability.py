"""The admin's availability view (issue 13, item 6): per task, its replicas with their hosts and
DPC states under the contract's recovery type and delay budget X, and every failover with the
failure that caused it; plus the failures the registry declared, for the timeline.

Read-only; built from the registry's rows: ``replicas``, ``contracts`` (``recovery``,
``max_delay_seconds``), ``movements`` (reasons failover and replica switch), the audit entries
of those movements (the technique of the replica that took over: the replica record itself
becomes the task at the commit) and ``participant_failures``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import (
    AuditEntry,
    Contract,
    Movement,
    MovementReason,
    MovementStatus,
    Participant,
    ParticipantFailure,
    Replica,
    Task,
)
from app.participants.liveness import liveness
from app.settings import Settings

TAKEOVERS = (MovementReason.failover, MovementReason.replica_switch)


@dataclass(frozen=True)
class ReplicaLine:
    host: str
    host_liveness: str
    technique: str
    state: str
    state_at: datetime
    epoch: int
    contract_id: int | None
    recovery: str | None  # the contract's recovery type: gap, rollback, precise
    max_delay_seconds: float | None  # X, the contract's delay budget


@dataclass(frozen=True)
class FailoverLine:
    movement_id: int
    task: str
    reason: str
    status: str
    src: str
    to: str
    technique: str | None
    recovery: str | None
    prepared_at: datetime
    finished_at: datetime | None
    # The failure of ``src`` the registry declared before the failover was asked for.
    failed_at: datetime | None
    last_heartbeat_at: datetime | None

    @property
    def at(self) -> datetime:
        return self.finished_at or self.prepared_at

    @property
    def recovery_seconds(self) -> float | None:
        """From the declared failure to the new host's commit."""
        if self.failed_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.failed_at).total_seconds()

    @property
    def detection_seconds(self) -> float | None:
        """From the failed host's last heartbeat to the declared failure."""
        if self.failed_at is None or self.last_heartbeat_at is None:
            return None
        return (self.failed_at - self.last_heartbeat_at).total_seconds()


@dataclass(frozen=True)
class TaskAvailability:
    task: str
    owner: str
    host: str
    host_liveness: str
    replicas: list[ReplicaLine]
    failovers: list[FailoverLine]


@dataclass(frozen=True)
class FailureLine:
    participant: str
    failed_at: datetime
    last_heartbeat_at: datetime | None
    rejoined_at: datetime | None
    aborted_movements: int


@dataclass(frozen=True)
class AvailabilityView:
    tasks: list[TaskAvailability]
    failures: list[FailureLine]

    @property
    def failovers(self) -> list[FailoverLine]:
        return sorted((f for t in self.tasks for f in t.failovers), key=lambda f: f.at)


def _techniques(session: Session, movement_ids: list[int]) -> dict[int, str]:
    if not movement_ids:
        return {}
    entries = session.scalars(
        select(AuditEntry).where(
            AuditEntry.entity_type == "movement",
            AuditEntry.action == "movement.prepared",
            AuditEntry.entity_id.in_(movement_ids),
        )
    )
    return {
        int(e.entity_id): str(e.detail["technique"])
        for e in entries
        if e.entity_id is not None and e.detail.get("technique")
    }


def _failure_before(
    failures: list[ParticipantFailure], participant_id: int, moment: datetime
) -> ParticipantFailure | None:
    earlier = [f for f in failures if f.participant_id == participant_id and f.failed_at <= moment]
    return max(earlier, key=lambda f: f.failed_at) if earlier else None


def availability(
    session: Session, settings: Settings, now: datetime | None = None
) -> AvailabilityView:
    now = now or datetime.now(UTC)
    people = {p.id: p for p in session.scalars(select(Participant))}
    live = {
        pid: liveness(
            p.last_heartbeat_at,
            now,
            interval_seconds=settings.heartbeat_interval_seconds,
            failed_at=p.failed_at,
        )
        for pid, p in people.items()
    }
    contracts = {c.id: c for c in session.scalars(select(Contract))}
    replicas: dict[int, list[Replica]] = {}
    for replica in session.scalars(select(Replica).order_by(Replica.id)):
        replicas.setdefault(replica.task_id, []).append(replica)
    takeovers = list(
        session.scalars(
            select(Movement)
            .where(Movement.reason.in_(TAKEOVERS))
            .order_by(Movement.prepared_at, Movement.id)
        )
    )
    by_task: dict[int, list[Movement]] = {}
    for movement in takeovers:
        by_task.setdefault(movement.task_id, []).append(movement)
    failures = list(
        session.scalars(select(ParticipantFailure).order_by(ParticipantFailure.failed_at))
    )
    techniques = _techniques(session, [m.id for m in takeovers])
    wanted = set(replicas) | set(by_task)
    tasks = (
        list(session.scalars(select(Task).where(Task.id.in_(wanted)).order_by(Task.name)))
        if wanted
        else []
    )

    def terms(contract_id: int | None) -> tuple[str | None, float | None]:
        contract = contracts.get(contract_id) if contract_id is not None else None
        if contract is None:
            return None, None
        recovery = contract.recovery.value if contract.recovery is not None else None
        return recovery, contract.max_delay_seconds

    out = []
    for task in tasks:
        lines = []
        for r in sorted(replicas.get(task.id, []), key=lambda r: people[r.participant_id].name):
            recovery, budget = terms(r.contract_id)
            lines.append(
                ReplicaLine(
                    host=people[r.participant_id].name,
                    host_liveness=live[r.participant_id],
                    technique=r.technique.value,
                    state=r.state,
                    state_at=r.state_at,
                    epoch=r.lease_epoch,
                    contract_id=r.contract_id,
                    recovery=recovery,
                    max_delay_seconds=budget,
                )
            )
        moves = []
        for m in by_task.get(task.id, []):
            failure = _failure_before(failures, m.from_id, m.prepared_at)
            moves.append(
                FailoverLine(
                    movement_id=m.id,
                    task=task.name,
                    reason=m.reason.value,
                    status=m.status.value,
                    src=people[m.from_id].name,
                    to=people[m.to_id].name,
                    technique=techniques.get(m.id),
                    recovery=terms(m.contract_id)[0],
                    prepared_at=m.prepared_at,
                    finished_at=m.finished_at if m.status is MovementStatus.committed else None,
                    failed_at=failure.failed_at if failure is not None else None,
                    last_heartbeat_at=failure.last_heartbeat_at if failure is not None else None,
                )
            )
        out.append(
            TaskAvailability(
                task=task.name,
                owner=people[task.owner_id].name,
                host=people[task.host_id].name,
                host_liveness=live[task.host_id],
                replicas=lines,
                failovers=moves,
            )
        )
    return AvailabilityView(
        tasks=out,
        failures=[
            FailureLine(
                participant=people[f.participant_id].name,
                failed_at=f.failed_at,
                last_heartbeat_at=f.last_heartbeat_at,
                rejoined_at=f.rejoined_at,
                aborted_movements=f.aborted_movements,
            )
            for f in failures
        ],
    )
