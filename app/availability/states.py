"""The DPC node state machine (Borealis SIGMOD 2005, section 4).

STABLE: every output is stable. UP_FAILURE: some input is missing or tentative, so the node
processes tentative buckets and its output is tentative. STABILIZATION: the failure healed and
the node reconciles (checkpoint/redo) and corrects its output. A new failure during
stabilization sends it back to UP_FAILURE; REC_DONE on every output brings it back to STABLE.
"""

from __future__ import annotations

import enum


class NodeState(enum.StrEnum):
    STABLE = "STABLE"
    UP_FAILURE = "UP_FAILURE"
    STABILIZATION = "STABILIZATION"


class NodeEvent(enum.StrEnum):
    # A bucket had to be processed without all of its stable input.
    TENTATIVE_INPUT = "tentative_input"
    # All input is stable again and reconciliation was permitted.
    HEALED = "healed"
    # Reconciliation finished and REC_DONE was sent on every output.
    RECONCILED = "reconciled"


class IllegalTransition(ValueError):
    def __init__(self, state: NodeState, event: NodeEvent) -> None:
        super().__init__(f"node state {state}: event {event} is not allowed")
        self.state = state
        self.event = event


_TRANSITIONS: dict[tuple[NodeState, NodeEvent], NodeState] = {
    (NodeState.STABLE, NodeEvent.TENTATIVE_INPUT): NodeState.UP_FAILURE,
    (NodeState.UP_FAILURE, NodeEvent.TENTATIVE_INPUT): NodeState.UP_FAILURE,
    (NodeState.UP_FAILURE, NodeEvent.HEALED): NodeState.STABILIZATION,
    (NodeState.STABILIZATION, NodeEvent.TENTATIVE_INPUT): NodeState.UP_FAILURE,
    (NodeState.STABILIZATION, NodeEvent.RECONCILED): NodeState.STABLE,
}


def transition(state: NodeState, event: NodeEvent) -> NodeState:
    """The next state; IllegalTransition for an event the state cannot take."""
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


def legal_events(state: NodeState) -> frozenset[NodeEvent]:
    return frozenset(event for (s, event) in _TRANSITIONS if s == state)
