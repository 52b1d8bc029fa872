"""Which participants an audit entry is about: the entries each participant may read.

Derived from what the entry touched, so no service has to say it: a participant entry is about
that participant; a contract, about both parties; a task, about its owner and host; an offer,
about its giver and taker; a movement, about both ends and the task's owner; a permit, about the
participant whose replica asked for it; and every entry is about the participant that acted.
Migration 0008 applies the same rule to the entries written before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from app.models import (
    AuditEntry,
    Contract,
    Movement,
    Offer,
    Participant,
    ReconciliationPermit,
    Task,
)

PARTICIPANT_ACTOR = "participant:"
# session.info: participant ids of actors the session already knows (the authenticated caller).
KNOWN_ACTORS = "fedload.audit.known_actors"
# session.info: the parties of contracts the session wrote as rows, not objects, by id.
KNOWN_PARTIES = "fedload.audit.known_parties"


@dataclass(frozen=True)
class Concerned:
    participant_ids: frozenset[int]
    # The reason of a movement entry, for the movement counters (``app/observability``).
    movement_reason: str | None = None


def concerned(session: Session, entry: AuditEntry, actors: dict[str, int | None]) -> Concerned:
    """The participants ``entry`` is about. ``actors`` caches participant ids by actor name."""
    ids: set[int] = set()
    reason: str | None = None
    actor_id = _actor_id(session, entry.actor, actors)
    if actor_id is not None:
        ids.add(actor_id)
    if entry.entity_id is not None:
        kind, key = entry.entity_type, entry.entity_id
        if kind == "participant":
            ids.add(key)
        elif kind == "contract" and (parties := _parties(session, key)) is not None:
            ids.update(parties)
        elif kind == "task" and (task := session.get(Task, key)) is not None:
            ids.update((task.owner_id, task.host_id))
        elif kind == "offer" and (offer := session.get(Offer, key)) is not None:
            ids.update((offer.from_id, offer.to_id))
        elif kind == "movement" and (movement := session.get(Movement, key)) is not None:
            ids.update((movement.from_id, movement.to_id))
            reason = movement.reason.value
            if (moved := session.get(Task, movement.task_id)) is not None:
                ids.add(moved.owner_id)
        elif kind == "permit" and (permit := session.get(ReconciliationPermit, key)) is not None:
            ids.update(p for p in (permit.participant_id,) if p is not None)
    return Concerned(frozenset(ids), reason)


# What an entry's entity_type names, for the rows ``concerned`` reads.
_MODELS: dict[str, type] = {
    "contract": Contract,
    "task": Task,
    "offer": Offer,
    "movement": Movement,
    "permit": ReconciliationPermit,
}
# session.info: the rows queued entries are about, held until the transaction ends.
KEPT = "fedload.audit.kept"


def keep_alive(session: Session, entry: AuditEntry) -> None:
    """Hold the row ``entry`` is about while the session has it. The session's identity map
    holds rows weakly: by the commit, where ``concerned`` reads the row, a row its service no
    longer references would be read again from the database, one query per entry."""
    model = _MODELS.get(entry.entity_type)
    if model is None or entry.entity_id is None:
        return
    row = session.identity_map.get(identity_key(model, entry.entity_id))
    if row is not None:
        session.info.setdefault(KEPT, []).append(row)


def remember_parties(session: Session, contract_id: int, parties: tuple[int, int]) -> None:
    """Contract ``contract_id``'s parties: its entries need no query to find them, even when
    the session wrote it as a row (``app/contracts/repository.py``) and holds no object."""
    session.info.setdefault(KNOWN_PARTIES, {})[contract_id] = parties


def _parties(session: Session, contract_id: int) -> tuple[int, int] | None:
    known: dict[int, tuple[int, int]] = session.info.get(KNOWN_PARTIES, {})
    if contract_id in known:
        return known[contract_id]
    contract = session.get(Contract, contract_id)
    return None if contract is None else (contract.proposer_id, contract.partner_id)


def remember_actor(session: Session, actor: str, participant_id: int) -> None:
    """``actor`` is participant ``participant_id``: its entries need no query to find it."""
    session.info.setdefault(KNOWN_ACTORS, {})[actor] = participant_id


def _actor_id(session: Session, actor: str, cache: dict[str, int | None]) -> int | None:
    if not actor.startswith(PARTICIPANT_ACTOR):
        return None
    known_actors: dict[str, int] = session.info.get(KNOWN_ACTORS, {})
    if actor in known_actors:
        return known_actors[actor]
    if actor not in cache:
        name = actor.removeprefix(PARTICIPANT_ACTOR)
        # Usually the caller authenticated in this very session: no query then.
        known = next(
            (
                p.id
                for p in session.identity_map.values()
                if isinstance(p, Participant) and p.name == name
            ),
            None,
        )
        cache[actor] = known or session.scalar(
            select(Participant.id).where(Participant.name == name)
        )
    return cache[actor]
