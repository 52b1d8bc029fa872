"""The negotiation rules, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.contracts.lifecycle import Action, ContractState, Status, is_due_to_expire, next_status
from app.errors import Conflict, Forbidden

END = datetime(2030, 1, 1, tzinfo=UTC)


def state(status: Status, version: int = 1, author: int | None = 1) -> ContractState:
    return ContractState(
        status=status, version=version, parties=(1, 2), terms_author_id=author, ends_at=END
    )


def test_partner_answers_proposal() -> None:
    assert (
        next_status(state(Status.proposed), Action.counter, actor_id=2, sent_version=1)
        is Status.countered
    )
    assert (
        next_status(state(Status.proposed), Action.accept, actor_id=2, sent_version=1)
        is Status.active
    )
    assert (
        next_status(state(Status.proposed), Action.reject, actor_id=2, sent_version=1)
        is Status.rejected
    )


def test_either_party_or_admin_terminates_active() -> None:
    for actor in (1, 2, None):
        assert (
            next_status(state(Status.active, 4), Action.terminate, actor_id=actor, sent_version=4)
            is Status.terminated
        )
    with pytest.raises(Forbidden):
        next_status(state(Status.active, 4), Action.terminate, actor_id=3, sent_version=4)


def test_stale_version_names_both_versions() -> None:
    with pytest.raises(Conflict, match="you sent 1, the contract is at version 2") as info:
        next_status(state(Status.countered, 2, author=2), Action.accept, actor_id=1, sent_version=1)
    assert info.value.field == "version"


@given(
    status=st.sampled_from(list(Status)),
    action=st.sampled_from(list(Action)),
    actor=st.sampled_from([1, 2, None]),
)
def test_no_transition_out_of_a_final_state_and_author_never_decides(
    status: Status, action: Action, actor: int | None
) -> None:
    try:
        result = next_status(state(status, author=1), action, actor_id=actor, sent_version=1)
    except (Conflict, Forbidden) as exc:
        assert exc.detail
        if status in (Status.rejected, Status.expired, Status.terminated):
            assert status.value in exc.detail
        return
    assert status in (Status.proposed, Status.countered, Status.active)
    if action is not Action.terminate:
        assert actor == 2, "only the party that did not write the terms may answer them"
    else:
        assert status is Status.active
    assert result is not status or action is Action.counter


def test_expiry() -> None:
    assert is_due_to_expire(state(Status.active), END)
    assert not is_due_to_expire(state(Status.active), END - timedelta(seconds=1))
    assert not is_due_to_expire(state(Status.terminated), END + timedelta(days=1))
