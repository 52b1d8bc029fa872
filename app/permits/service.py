"""The registry's reconciliation arbiter: one permit per fragment, as rows.

The rule is ``app.availability.leases`` (the scenarios' Flight arbiter applies the same one in
memory); this module only reads the fragment's row, applies the rule and writes it back, under a
lock held to the end of the request's transaction so two replicas racing for one permit are
decided one after the other:

- the row is made to exist first with an INSERT that does nothing on conflict: on SQLite that
  write opens the transaction with the database's write lock (pysqlite begins a transaction at
  the first write, so the read after it cannot be stale); on PostgreSQL a concurrent insert
  waits on the unique index until the first commits;
- the row is then read ``FOR UPDATE`` (PostgreSQL's row lock; SQLite already holds the lock).

Who may ask (``_authorise``, checked before anything is written, so a refusal leaves the
database as it was): the fragment is a registered task of which a participant holds a copy, as
its primary host or a replica host (404 otherwise, the same answer for both, so that a stranger
cannot learn which tasks exist), and a participant asks only under a replica name that is its
own copy's (403 otherwise). The registry names a copy by the participant hosting it
(``tasks.host``, ``GET /v1/replicas`` ``host``), and a participant holds at most one copy of a
task, so its copy may be asked for under its own participant name or a node name of its
choosing (the DPC nodes use theirs, e.g. ``C1``) that is not another copy's: neither another
participant's name, nor the replica name under which the permit was granted to another
participant. An admin may act for any copy of a registered task.

Every decision also names the other copies that serve the fragment's consumers now by the
registry's records (``serving``): a copy reconciling Borealis's way stops serving for its redo
(``fedload agent --reconcile auto``), which leaves its consumers within X only while another copy
serves, and no single copy can see the others.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.availability import leases
from app.availability.states import NodeState
from app.db import keyset
from app.db.base import utcnow
from app.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.models import Participant, ReconciliationPermit, Replica, ReplicaTechnique, Task
from app.permits.schemas import PermitDecision, PermitRead

MAX_NAME = 128


def _check_fragment(fragment: str) -> None:
    if not fragment.strip() or len(fragment) > MAX_NAME:
        raise InvalidInput(
            f"fragment must be a non-blank name of at most {MAX_NAME} characters, got {fragment!r}",
            field="fragment",
        )


def _authorise(session: Session, principal: Principal, fragment: str, replica: str) -> None:
    """Refuse (before any write) a request or release the principal may not make; see the
    module docstring for the rule."""
    unknown = NotFound(
        f"no task named {fragment!r} that you hold a copy of: a reconciliation permit is for a "
        "registered task and asked for by a copy of it",
        field="fragment",
    )
    task = session.scalar(select(Task).where(Task.name == fragment))
    if task is None:
        raise unknown
    if principal.participant_id is None:
        return  # the operator may act for any copy
    copies = {
        task.host_id,
        *session.scalars(select(Replica.participant_id).where(Replica.task_id == task.id)),
    }
    who = principal.name
    if principal.participant_id not in copies:
        # Not 403: that would tell a stranger the task exists (issue 15, "Existence leaks").
        raise unknown
    # Any other participant's name stands for that participant's copy (or for none of this
    # one's): never a name this participant may ask under.
    named = session.scalar(select(Participant.id).where(Participant.name == replica))
    granted_to = session.scalar(
        select(ReconciliationPermit.participant_id).where(
            ReconciliationPermit.fragment == fragment, ReconciliationPermit.holder == replica
        )
    )
    if named not in (None, principal.participant_id) or granted_to not in (
        None,
        principal.participant_id,
    ):
        raise Forbidden(_not_yours(fragment, replica, who), field="replica")


def _not_yours(fragment: str, replica: str, who: str) -> str:
    return (
        f"replica {replica!r} of fragment {fragment!r} is not participant {who!r}'s copy: it "
        "names another participant or was granted to another participant's copy"
    )


def _locked_row(session: Session, fragment: str, now: datetime) -> ReconciliationPermit:
    name = session.get_bind().dialect.name
    values = {"fragment": fragment, "holder": None, "expires_at": now, "fence": 0}
    values["updated_at"] = now
    if name == "postgresql":
        session.execute(
            postgresql.insert(ReconciliationPermit)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["fragment"])
        )
    elif name == "sqlite":
        session.execute(
            sqlite.insert(ReconciliationPermit)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["fragment"])
        )
    else:  # the registry runs on these two; another backend would race here unnoticed
        raise RuntimeError(f"reconciliation permits need SQLite or PostgreSQL, not {name}")
    row = session.scalar(
        select(ReconciliationPermit)
        .where(ReconciliationPermit.fragment == fragment)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    assert row is not None  # inserted or found a moment ago, under the lock
    return row


def _permit(row: ReconciliationPermit) -> leases.Permit:
    return leases.Permit(row.holder, row.expires_at.timestamp(), row.fence)


def request(
    session: Session,
    principal: Principal,
    fragment: str,
    replica: str,
    *,
    lease_seconds: float,
    now: datetime | None = None,
) -> PermitDecision:
    """Grant ``replica`` the fragment's permit, or say who holds it until when."""
    _check_fragment(fragment)
    _authorise(session, principal, fragment, replica)
    now = now or utcnow()
    row = _locked_row(session, fragment, now)
    if (
        principal.participant_id is not None
        and row.holder == replica
        and row.participant_id not in (None, principal.participant_id)
    ):
        # Granted to another participant between the check above and the lock: a "renewal"
        # under its copy's name would hand that participant's permit over.
        raise Forbidden(_not_yours(fragment, replica, principal.name), field="replica")
    decision = leases.request(_permit(row), replica, now.timestamp(), lease_seconds)
    if decision.granted:
        new_holder = decision.permit.fence != row.fence
        row.holder = replica
        row.participant_id = principal.participant_id
        row.expires_at = datetime.fromtimestamp(decision.permit.expires_at, UTC)
        row.fence = decision.permit.fence
        row.updated_at = now
        session.flush()
        if new_holder:  # renewals are routine; a change of holder is what an admin looks for
            audit.record(
                session,
                actor=principal.actor,
                action="permit.granted",
                entity_type="permit",
                entity_id=row.id,
                detail={"fragment": fragment, "replica": replica, "fence": row.fence},
            )
    read = to_read(session, [row], now)[0]
    return PermitDecision(
        **read.model_dump(),
        replica=replica,
        granted=decision.granted,
        serving=serving_others(session, principal, fragment, replica),
    )


# A copy in these states sends its consumers output within X (tentative in UP_FAILURE); in
# STABILIZATION it is reconciling, and one that stands down for its redo sends nothing.
SERVING_STATES = frozenset({NodeState.STABLE.value, NodeState.UP_FAILURE.value})


def serving_others(
    session: Session, principal: Principal, fragment: str, replica: str
) -> list[str]:
    """The participants holding another copy of ``fragment`` than the asker's that serve its
    consumers now, by the registry's records: the primary host (its fragment runs as a plain
    query, STABLE to a consumer) and each active standby whose last reported DPC state is
    STABLE or UP_FAILURE, none of them failed. The asker is the principal's participant, or for
    the operator the participant named ``replica`` (if any)."""
    task = session.scalar(select(Task).where(Task.name == fragment))
    if task is None:
        return []
    asker = principal.participant_id
    if asker is None:
        asker = session.scalar(select(Participant.id).where(Participant.name == replica))
    candidates: list[tuple[int | None, bool]] = [(task.host_id, True)]
    candidates += [
        (r.participant_id, r.state in SERVING_STATES)
        for r in session.scalars(
            select(Replica).where(
                Replica.task_id == task.id,
                Replica.technique == ReplicaTechnique.active_standby,
            )
        )
    ]
    wanted = {p for p, serves in candidates if serves and p is not None and p != asker}
    if not wanted:
        return []
    alive = session.scalars(
        select(Participant).where(
            Participant.id.in_(wanted),
            Participant.failed_at.is_(None),
            Participant.liveness != "failed",
        )
    )
    by_id = {p.id: p.name for p in alive}
    return [by_id[p] for p, _ in candidates if p in by_id and p in wanted]


def release(session: Session, principal: Principal, fragment: str, replica: str) -> PermitRead:
    """``replica`` gives the permit back; refused unless it is the holder."""
    _check_fragment(fragment)
    _authorise(session, principal, fragment, replica)
    now = utcnow()
    row = _locked_row(session, fragment, now)
    try:
        released = leases.release(_permit(row), replica)
    except leases.NotHolder as error:
        raise Conflict(f"permit of fragment {fragment!r}: {error}", field="replica") from error
    if principal.participant_id is not None and row.participant_id not in (
        None,
        principal.participant_id,
    ):
        raise Forbidden(
            f"the permit of fragment {fragment!r} was granted to another participant's replica",
            field="replica",
        )
    row.holder = released.holder
    row.updated_at = now
    session.flush()
    audit.record(
        session,
        actor=principal.actor,
        action="permit.released",
        entity_type="permit",
        entity_id=row.id,
        detail={"fragment": fragment, "replica": replica, "fence": row.fence},
    )
    return to_read(session, [row], now)[0]


def listed(session: Session) -> list[PermitRead]:
    return to_read(session, permits_page(session), utcnow())


def permits_page(
    session: Session, *, after: str | None = None, limit: int | None = None
) -> list[ReconciliationPermit]:
    """Every fragment's permit by fragment (unique); a page after ``after`` when given."""
    query = keyset.after(
        select(ReconciliationPermit),
        [ReconciliationPermit.fragment],
        None if after is None else (after,),
    )
    return list(session.scalars(query.order_by(ReconciliationPermit.fragment).limit(limit)))


def to_read(session: Session, rows: list[ReconciliationPermit], now: datetime) -> list[PermitRead]:
    ids = {r.participant_id for r in rows if r.participant_id is not None}
    names = (
        dict(
            session.execute(
                select(Participant.id, Participant.name).where(Participant.id.in_(ids))
            ).all()
        )
        if ids
        else {}
    )
    return [
        PermitRead(
            fragment=r.fragment,
            holder=r.holder,
            participant=names.get(r.participant_id) if r.participant_id is not None else None,
            expires_at=r.expires_at,
            fence=r.fence,
            held=_permit(r).held_at(now.timestamp()),
        )
        for r in rows
    ]
