"""The DPC node state machine: only the paper's transitions are legal."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.availability import IllegalTransition, NodeEvent, NodeState, transition
from app.availability.states import legal_events


def test_failure_cycle() -> None:
    state = NodeState.STABLE
    for event, expected in [
        (NodeEvent.TENTATIVE_INPUT, NodeState.UP_FAILURE),
        (NodeEvent.TENTATIVE_INPUT, NodeState.UP_FAILURE),
        (NodeEvent.HEALED, NodeState.STABILIZATION),
        (NodeEvent.TENTATIVE_INPUT, NodeState.UP_FAILURE),
        (NodeEvent.HEALED, NodeState.STABILIZATION),
        (NodeEvent.RECONCILED, NodeState.STABLE),
    ]:
        state = transition(state, event)
        assert state is expected


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (NodeState.STABLE, NodeEvent.HEALED),
        (NodeState.STABLE, NodeEvent.RECONCILED),
        (NodeState.UP_FAILURE, NodeEvent.RECONCILED),
        (NodeState.STABILIZATION, NodeEvent.HEALED),
    ],
)
def test_illegal_transitions_are_refused(state: NodeState, event: NodeEvent) -> None:
    with pytest.raises(IllegalTransition, match=f"{state}"):
        transition(state, event)


def test_stable_is_reached_only_through_stabilization() -> None:
    for state, event in itertools.product(NodeState, NodeEvent):
        if event in legal_events(state) and transition(state, event) is NodeState.STABLE:
            assert state is NodeState.STABILIZATION


@given(st.lists(st.sampled_from(list(NodeEvent)), max_size=40))
def test_any_event_sequence_stays_inside_the_machine(events: list[NodeEvent]) -> None:
    state = NodeState.STABLE
    for event in events:
        if event in legal_events(state):
            state = transition(state, event)
        else:
            with pytest.raises(IllegalTransition):
                transition(state, event)
    assert state in NodeState
