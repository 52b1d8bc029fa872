"""What each admin page shows, assembled from the repositories and services. Read-only.

Nothing here writes: a page polled every two seconds must not touch the registry (liveness is
computed for display with the same pure rule the API uses, instead of being stored).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import ADMIN
from app.contracts import repository as contracts_repo
from app.contracts import service as contracts
from app.contracts.schemas import ContractEventRead, ContractRead, LedgerRead
from app.errors import NotFound
from app.market.acceptability import (
    MEASURED_TOLERANCE,
    Acceptability,
    Link,
    Position,
    judge_allocation,
)
from app.market.cost_models import CostModel, CostModelError, build_cost_model, marginal_cost
from app.models import (
    AuditEntry,
    Contract,
    ContractStatus,
    Participant,
    ParticipantSample,
    ReconciliationPermit,
    Replica,
    Task,
)
from app.movements import repository as movements_repo
from app.movements import service as movements
from app.movements.schemas import MovementRead
from app.participant.bpm_decisions import BpmDecisions
from app.participant.decisions import ContractView
from app.participants import repository as participants
from app.participants.liveness import liveness
from app.settings import Settings
from app.tasks import repository as tasks_repo
from app.tasks import service as tasks
from app.tasks.schemas import TaskRead


@dataclass(frozen=True)
class ParticipantRow:
    id: int
    name: str
    status: str
    liveness: str
    capacity: float
    load: float | None
    # "reported" when the agent sent it, "hosted tasks" when summed from the registry.
    load_source: str
    threshold: float
    marginal_cost: float | None
    node_state: str | None
    sampled_at: datetime | None
    active_contracts: int
    hosted_tasks: int


@dataclass(frozen=True)
class Overview:
    rows: list[ParticipantRow]
    # The one acceptability rule (app.market.acceptability) on the active participants, over
    # the active contracts, so that "not acceptable" says what blocks the load.
    verdict: Acceptability
    tasks: int


def _decisions(participant: Participant) -> BpmDecisions | None:
    try:
        return BpmDecisions.for_model(participant.cost_model, participant.capacity, 0.0)
    except CostModelError:
        return None


def _views(participant: Participant, contracts_: list[Contract]) -> list[ContractView]:
    return [
        ContractView(
            id=c.id,
            partner=str(c.partner_id if c.proposer_id == participant.id else c.proposer_id),
            price_min=c.price_min,
            price_max=c.price_max,
            min_move_seconds=c.min_move_seconds,
        )
        for c in contracts_
        if c.status is ContractStatus.active and participant.id in c.parties()
    ]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _row(
    participant: Participant,
    sample: ParticipantSample | None,
    active: list[Contract],
    hosted: list[TaskRead],
    settings: Settings,
    now: datetime,
) -> ParticipantRow:
    decisions = _decisions(participant)
    hosted_load = sum(t.load for t in hosted)
    load = sample.load if sample is not None else hosted_load
    if sample is not None and sample.threshold is not None:
        threshold = sample.threshold
    elif decisions is not None:
        # The agent's own rule: where its marginal cost meets its contracts' prices.
        threshold = decisions.threshold(_views(participant, active))
    else:
        threshold = participant.capacity
    if sample is not None and sample.marginal_cost is not None:
        mc: float | None = sample.marginal_cost
    else:
        mc = _finite(decisions.marginal_cost(load)) if decisions is not None else None
    return ParticipantRow(
        id=participant.id,
        name=participant.name,
        status=participant.status.value,
        liveness=liveness(
            participant.last_heartbeat_at,
            now,
            interval_seconds=settings.heartbeat_interval_seconds,
            failed_at=participant.failed_at,
        ),
        capacity=participant.capacity,
        load=load,
        load_source="reported" if sample is not None else "hosted tasks",
        threshold=threshold,
        marginal_cost=mc,
        node_state=sample.node_state if sample is not None else None,
        sampled_at=sample.at if sample is not None else None,
        active_contracts=sum(1 for c in active if participant.id in c.parties()),
        hosted_tasks=len(hosted),
    )


def overview(session: Session, settings: Settings, now: datetime | None = None) -> Overview:
    now = now or datetime.now(UTC)
    people = participants.all_participants(session)
    samples = participants.latest_samples(session)
    active = contracts_repo.for_participant(session, None, status=ContractStatus.active)
    all_tasks = tasks.to_read(session, tasks_repo.visible_to(session, None))
    hosted: dict[str, list[TaskRead]] = {p.name: [] for p in people}
    for t in all_tasks:
        hosted.setdefault(t.host, []).append(t)
    rows = [_row(p, samples.get(p.id), active, hosted[p.name], settings, now) for p in people]
    return Overview(rows=rows, verdict=judge(people, rows, active, hosted), tasks=len(all_tasks))


def _model(participant: Participant) -> CostModel | None:
    try:
        return build_cost_model(participant.cost_model, participant.capacity)
    except CostModelError:
        return None


def judge(
    people: list[Participant],
    rows: list[ParticipantRow],
    active: list[Contract],
    hosted: dict[str, list[TaskRead]],
) -> Acceptability:
    """The allocation's verdict as the simulator would give it on the same standings.

    Loads are measured (an agent's report, else the hosted tasks' declared loads), so they get
    ``MEASURED_TOLERANCE``; task granularity comes from each participant's smallest hosted task
    and its cost model; the threshold price is the model's marginal cost at the threshold. No
    hysteresis band: the registry has none of its own.
    """
    by_id = {p.id: p for p in people}
    positions = []
    for row in rows:
        if row.status != "active":
            continue
        sizes = [t.load for t in hosted.get(row.name, []) if t.load > 0]
        positions.append(
            Position(
                name=row.name,
                load=row.load or 0.0,
                threshold=row.threshold,
                smallest_task=min(sizes) if sizes else None,
                model=_model(by_id[row.id]),
            )
        )
    links = [
        Link(by_id[c.proposer_id].name, by_id[c.partner_id].name, c.price_min, c.price_max)
        for c in active
        if c.proposer_id in by_id and c.partner_id in by_id
    ]
    return judge_allocation(positions, links, tolerance=MEASURED_TOLERANCE)


def participant_names(session: Session) -> list[str]:
    return [p.name for p in participants.all_participants(session)]


def allocation(session: Session, participant: str | None) -> list[TaskRead]:
    if participant:
        found = participants.get_by_name(session, participant)
        if found is None:
            raise NotFound(f"participant {participant!r} not found", field="participant")
        return tasks.to_read(session, tasks_repo.visible_to(session, found.id))
    return tasks.to_read(session, tasks_repo.visible_to(session, None))


@dataclass(frozen=True)
class TaskDetail:
    task: TaskRead
    moves: list[MovementRead]
    audit: list[AuditEntry]


def task_detail(session: Session, name: str) -> TaskDetail:
    task = tasks.get_visible(session, ADMIN, name)
    moves = movements.to_read(session, movements_repo.for_task(session, task.id))
    return TaskDetail(
        task=tasks.to_read(session, [task])[0],
        moves=moves,
        audit=audit.for_entity(session, "task", task.id),
    )


def contract_list(session: Session) -> list[ContractRead]:
    return [contracts.to_read(session, c) for c in contracts_repo.for_participant(session, None)]


@dataclass(frozen=True)
class ContractDetail:
    contract: ContractRead
    history: list[ContractEventRead]
    ledger: LedgerRead
    tasks: list[TaskRead]


def contract_detail(session: Session, contract_id: int) -> ContractDetail:
    contract = contracts.get_visible(session, ADMIN, contract_id)
    under = [t for t in tasks_repo.visible_to(session, None) if t.contract_id == contract.id]
    return ContractDetail(
        contract=contracts.to_read(session, contract),
        history=contracts.history(session, ADMIN, contract_id),
        ledger=contracts.ledger(session, ADMIN, contract_id),
        tasks=tasks.to_read(session, under),
    )


def movement_list(session: Session, limit: int = 300) -> list[MovementRead]:
    return movements.to_read(session, movements_repo.visible_to(session, None, limit=limit))


@dataclass(frozen=True)
class CurvePoint:
    load: float
    marginal_cost: float


@dataclass(frozen=True)
class ParticipantDetail:
    row: ParticipantRow
    participant: Participant
    samples: list[ParticipantSample]
    owned: list[TaskRead]
    hosted: list[TaskRead]
    contracts: list[ContractRead]
    replica_partners: list[ContractRead]
    curve: list[CurvePoint]
    audit: list[AuditEntry]


def _mc_curve(participant: Participant, top_price: float) -> list[CurvePoint]:
    """The marginal-cost curve up to where it is well past every contract price."""
    try:
        model = build_cost_model(participant.cost_model, participant.capacity)
    except CostModelError:
        return []
    limit = participant.capacity * 0.99
    points: list[CurvePoint] = []
    for i in range(81):
        load = limit * i / 80
        mc = marginal_cost(model, load, 0.0)
        if not math.isfinite(mc):
            break
        points.append(CurvePoint(load, mc))
        # Past four times the dearest price the curve only squashes the part that matters.
        if top_price > 0 and mc > 4 * top_price:
            break
    return points


def participant_detail(
    session: Session, settings: Settings, name: str, now: datetime | None = None
) -> ParticipantDetail:
    now = now or datetime.now(UTC)
    participant = participants.get_by_name(session, name)
    if participant is None:
        raise NotFound(f"participant {name!r} not found", field="name")
    mine = contracts_repo.for_participant(session, participant.id)
    active = [c for c in mine if c.status is ContractStatus.active]
    visible = tasks.to_read(session, tasks_repo.visible_to(session, participant.id))
    hosted = [t for t in visible if t.host == name]
    samples = participants.recent_samples(session, participant.id)
    row = _row(participant, samples[-1] if samples else None, active, hosted, settings, now)
    reads = [contracts.to_read(session, c) for c in mine]
    top_price = max((c.price_max for c in active), default=0.0)
    return ParticipantDetail(
        row=row,
        participant=participant,
        samples=samples,
        owned=[t for t in visible if t.owner == name],
        hosted=hosted,
        contracts=reads,
        replica_partners=[
            c for c in reads if c.status is ContractStatus.active and c.availability is not None
        ],
        curve=_mc_curve(participant, top_price),
        audit=audit.for_entity(session, "participant", participant.id),
    )


def audit_log(session: Session, limit: int = 200) -> list[AuditEntry]:
    return audit.recent(session, limit=limit)


def reason_counts(moves: list[MovementRead]) -> Counter[str]:
    return Counter(m.reason.value for m in moves)


@dataclass(frozen=True)
class CopyRow:
    """One replica of a task, as the registry holds it."""

    host: str
    host_liveness: str
    technique: str
    # The DPC state the host last reported (STABLE, UP_FAILURE, STABILIZATION).
    state: str
    state_at: datetime
    epoch: int
    load: float


@dataclass(frozen=True)
class PermitRow:
    holder: str
    # The participant the permit was granted to; None when the operator asked for it.
    participant: str | None
    expires_at: datetime
    fence: int


@dataclass(frozen=True)
class TaskCopies:
    task: str
    owner: str
    primary_host: str
    primary_liveness: str
    replicas: list[CopyRow]
    # The reconciliation permit while a replica holds an unexpired lease, else None.
    permit: PermitRow | None


@dataclass(frozen=True)
class ReplicaOverview:
    tasks: list[TaskCopies]
    # Replicas hosted per participant (every participant, zeros included), by name.
    per_participant: list[tuple[str, int]]


def replica_overview(
    session: Session, settings: Settings, now: datetime | None = None
) -> ReplicaOverview:
    """Each task with at least one replica: its primary host, every replica (host, state,
    epoch) and the reconciliation permit holder with its lease expiry, if one is held."""
    now = now or datetime.now(UTC)
    people = {p.id: p for p in participants.all_participants(session)}
    live = {
        pid: liveness(
            p.last_heartbeat_at,
            now,
            interval_seconds=settings.heartbeat_interval_seconds,
            failed_at=p.failed_at,
        )
        for pid, p in people.items()
    }
    by_task: dict[int, list[Replica]] = {}
    for replica in session.scalars(select(Replica).order_by(Replica.task_id, Replica.id)):
        by_task.setdefault(replica.task_id, []).append(replica)
    task_rows: list[Task] = (
        list(session.scalars(select(Task).where(Task.id.in_(by_task)).order_by(Task.name)))
        if by_task
        else []
    )
    permits = {
        p.fragment: p
        for p in session.scalars(select(ReconciliationPermit))
        # Held now: a released permit or a lapsed lease has no holder to show.
        if p.holder is not None and now < p.expires_at
    }
    out = []
    for task in task_rows:
        permit = permits.get(task.name)
        out.append(
            TaskCopies(
                task=task.name,
                owner=people[task.owner_id].name,
                primary_host=people[task.host_id].name,
                primary_liveness=live[task.host_id],
                replicas=[
                    CopyRow(
                        host=people[r.participant_id].name,
                        host_liveness=live[r.participant_id],
                        technique=r.technique.value,
                        state=r.state,
                        state_at=r.state_at,
                        epoch=r.lease_epoch,
                        load=r.load,
                    )
                    for r in sorted(by_task[task.id], key=lambda r: people[r.participant_id].name)
                ],
                permit=None
                if permit is None or permit.holder is None
                else PermitRow(
                    holder=permit.holder,
                    participant=people[permit.participant_id].name
                    if permit.participant_id in people
                    else None,
                    expires_at=permit.expires_at,
                    fence=permit.fence,
                ),
            )
        )
    hosted = Counter(people[r.participant_id].name for copies in by_task.values() for r in copies)
    per_participant = [(p.name, hosted.get(p.name, 0)) for p in people.values()]
    return ReplicaOverview(tasks=out, per_participant=per_participant)
