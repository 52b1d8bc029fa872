"""Apply a federation document to the registry: validate, then upsert idempotently.

Natural keys: participants and tasks by name, contracts by their unordered pair of parties.
Applying the same document twice changes nothing; the caller's transaction makes a failing
document change nothing either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.keys import hash_api_key, new_api_key
from app.contracts import repository as contracts_repo
from app.contracts.service import terms_snapshot
from app.db.base import utcnow
from app.federation.document import ContractSpec, FederationDoc, TaskSpec, contract_term
from app.models import Contract, ContractEvent, ContractStatus, Participant, Task
from app.movements.payments import accrue_task
from app.participants import repository as participants_repo
from app.tasks import repository as tasks_repo
from app.tasks.service import created_detail


@dataclass
class ApplyResult:
    changes: list[str] = field(default_factory=list)
    # API keys of participants created by this apply; shown once to whoever applied the file.
    new_keys: dict[str, str] = field(default_factory=dict)


def apply_federation(session: Session, doc: FederationDoc, *, actor: str) -> ApplyResult:
    result = ApplyResult()
    by_name = _upsert_participants(session, doc, actor, result)
    _upsert_contracts(session, doc, by_name, actor, result)
    _upsert_tasks(session, doc, by_name, actor, result)
    session.flush()
    return result


def _upsert_participants(
    session: Session, doc: FederationDoc, actor: str, result: ApplyResult
) -> dict[str, Participant]:
    existing = participants_repo.by_names(session, [p.name for p in doc.participants])
    for spec in doc.participants:
        cost_model = dict(spec.cost_model)
        profile = dict(spec.profile)
        current = existing.get(spec.name)
        if current is None:
            key = new_api_key()
            current = Participant(
                name=spec.name,
                capacity=spec.capacity,
                cost_model=cost_model,
                profile=profile,
                api_key_hash=hash_api_key(key),
            )
            session.add(current)
            session.flush()
            existing[spec.name] = current
            result.new_keys[spec.name] = key
            result.changes.append(f"participant {spec.name}: created")
            audit.record(
                session,
                actor=actor,
                action="participant.created",
                entity_type="participant",
                entity_id=current.id,
                detail={"name": spec.name, "capacity": spec.capacity},
            )
            continue
        wanted = (spec.capacity, cost_model, profile)
        if (current.capacity, current.cost_model, current.profile) != wanted:
            current.capacity, current.cost_model, current.profile = wanted
            session.flush()
            result.changes.append(f"participant {spec.name}: updated")
            audit.record(
                session,
                actor=actor,
                action="participant.updated",
                entity_type="participant",
                entity_id=current.id,
                detail={"capacity": spec.capacity},
            )
    return existing


def _contract_fields(spec: ContractSpec) -> dict[str, object]:
    availability = spec.availability
    return {
        "price_min": spec.price_min,
        "price_max": spec.price_max,
        "min_move_seconds": spec.min_move_seconds,
        "recovery": availability.recovery if availability else None,
        "max_delay_seconds": availability.max_delay_seconds if availability else None,
        "replica_hosting": availability.replica_hosting if availability else False,
    }


def _upsert_contracts(
    session: Session,
    doc: FederationDoc,
    by_name: dict[str, Participant],
    actor: str,
    result: ApplyResult,
) -> None:
    now = utcnow()
    for spec in doc.contracts:
        a, b = by_name[spec.a], by_name[spec.b]
        current = contracts_repo.live_between(session, a.id, b.id)
        fields = _contract_fields(spec)
        if current is None:
            starts, ends = contract_term(spec, now)
            # A file is signed by both parties out of band: its contracts start active.
            current = Contract(
                proposer_id=a.id,
                partner_id=b.id,
                status=ContractStatus.active,
                starts_at=starts,
                ends_at=ends,
                terms_author_id=None,
                **fields,
            )
            session.add(current)
            session.flush()
            _history(session, current, "applied", actor)
            result.changes.append(f"contract {spec.a}-{spec.b}: created (id {current.id})")
            continue
        # Only explicit terms in the file are compared: an absent term means "keep what is there".
        if spec.starts_at is not None:
            fields["starts_at"] = spec.starts_at
        if spec.ends_at is not None:
            fields["ends_at"] = spec.ends_at
        if current.status is not ContractStatus.active:
            fields["status"] = ContractStatus.active
        changed = {k: v for k, v in fields.items() if getattr(current, k) != v}
        if changed:
            for key, value in changed.items():
                setattr(current, key, value)
            current.terms_author_id = None
            session.flush()
            _history(session, current, "applied", actor)
            result.changes.append(f"contract {spec.a}-{spec.b}: updated {sorted(changed)}")


def _history(session: Session, contract: Contract, action: str, actor: str) -> None:
    session.add(
        ContractEvent(
            contract_id=contract.id,
            version=contract.version,
            action=action,
            author_id=None,
            actor=actor,
            terms=terms_snapshot(contract),
        )
    )
    audit.record(
        session,
        actor=actor,
        action=f"contract.{action}",
        entity_type="contract",
        entity_id=contract.id,
        detail={"version": contract.version},
    )


def _task_fields(spec: TaskSpec, owner: Participant) -> dict[str, Any]:
    """What a file sets on a task: its owner, declared load, fragment or own work. The host
    is the market's business once a task exists."""
    return {
        "owner_id": owner.id,
        "load": spec.load,
        "fragment": spec.fragment,
        "params": dict(spec.params),
        "inputs": [{"task": name} for name in spec.inputs],
        "work": dict(spec.work),
        "synthetic": spec.synthetic,
        "output_schema": spec.output_schema,
    }


def _changed_fields(spec: TaskSpec, current: Task, fields: dict[str, Any]) -> dict[str, Any]:
    """What applying the file again changes. Own work's load is measured by its host (the
    file's is an initial estimate), and its output schema is Spark's once the owner's agent
    analysed it: both stay unless the work itself changed, which asks for a new analysis."""
    changed = {k: v for k, v in fields.items() if getattr(current, k) != v}
    if spec.work:
        changed.pop("load", None)
        if "work" not in changed:
            changed.pop("output_schema", None)
        elif current.analysis_error is not None:
            changed["analysis_error"] = None
    return changed


def _upsert_tasks(
    session: Session,
    doc: FederationDoc,
    by_name: dict[str, Participant],
    actor: str,
    result: ApplyResult,
) -> None:
    for spec in doc.tasks:
        owner = by_name[spec.owner]
        fields = _task_fields(spec, owner)
        current = tasks_repo.get_by_name(session, spec.name)
        if current is None:
            task = Task(name=spec.name, host_id=by_name[spec.initial_host].id, **fields)
            session.add(task)
            session.flush()
            result.changes.append(f"task {spec.name}: created")
            audit.record(
                session,
                actor=actor,
                action="task.created",
                entity_type="task",
                entity_id=task.id,
                detail=created_detail(task),
            )
            continue
        changed = _changed_fields(spec, current, fields)
        if changed:
            if "load" in changed:
                # Payments up to now are at the old load (as a load change through the API).
                accrue_task(session, current, utcnow())
            for key, value in changed.items():
                setattr(current, key, value)
            session.flush()
            result.changes.append(f"task {spec.name}: updated {sorted(changed)}")
            audit.record(
                session,
                actor=actor,
                action="task.updated",
                entity_type="task",
                entity_id=current.id,
                detail={k: v for k, v in changed.items() if k != "owner_id"}
                | ({"owner": spec.owner} if "owner_id" in changed else {}),
            )
