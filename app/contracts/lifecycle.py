"""Negotiation rules of a contract, as pure functions of its state (no ORM, no web).

    proposed --counter--> countered --counter--> countered ...
    proposed | countered --accept--> active --terminate--> terminated
    proposed | countered --reject--> rejected
    any live state past its end --> expired

Only the party that did not write the terms on the table may counter, accept or reject them;
either party may terminate an active contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.errors import Conflict, Forbidden


class Status(StrEnum):
    proposed = "proposed"
    countered = "countered"
    active = "active"
    rejected = "rejected"
    expired = "expired"
    terminated = "terminated"


class Action(StrEnum):
    counter = "counter"
    accept = "accept"
    reject = "reject"
    terminate = "terminate"


NEGOTIATING = frozenset({Status.proposed, Status.countered})
LIVE = NEGOTIATING | {Status.active}

_ALLOWED_FROM: dict[Action, frozenset[Status]] = {
    Action.counter: NEGOTIATING,
    Action.accept: NEGOTIATING,
    Action.reject: NEGOTIATING,
    Action.terminate: frozenset({Status.active}),
}

_RESULT: dict[Action, Status | None] = {
    Action.counter: Status.countered,
    Action.accept: Status.active,
    Action.reject: Status.rejected,
    Action.terminate: Status.terminated,
}


@dataclass(frozen=True)
class ContractState:
    status: Status
    version: int
    parties: tuple[int, int]
    terms_author_id: int | None
    ends_at: datetime


def is_due_to_expire(state: ContractState, now: datetime) -> bool:
    return state.status in LIVE and now >= state.ends_at


def next_status(
    state: ContractState,
    action: Action,
    *,
    actor_id: int | None,
    sent_version: int,
) -> Status:
    """The status after ``action``, or the domain error that refuses it.

    ``actor_id`` None means an admin, who may terminate but never negotiates for a party.
    """
    if sent_version != state.version:
        raise Conflict(
            f"stale version: you sent {sent_version}, the contract is at version {state.version} "
            f"(status {state.status.value}); re-read it and decide again",
            field="version",
        )
    if state.status not in _ALLOWED_FROM[action]:
        raise Conflict(
            f"cannot {action.value} a contract that is {state.status.value}",
            field="status",
        )
    if action is Action.terminate:
        if actor_id is not None and actor_id not in state.parties:
            raise Forbidden("only a party to the contract may terminate it")
    else:
        if actor_id is None:
            raise Forbidden(f"an admin cannot {action.value} on a party's behalf")
        if actor_id == state.terms_author_id:
            raise Forbidden(
                f"you wrote the terms on the table; only the other party may {action.value} them",
                field="version",
            )
    result = _RESULT[action]
    assert result is not None
    return result
