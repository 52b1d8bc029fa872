"""Delay, Process and Correct (DPC) and replica management: the pure availability engine.

Standard library only, so the agents, the service, the scenarios and the benchmark all run the
same decisions. The algorithms follow Balazinska et al., "Fault-tolerance in the Borealis
distributed stream processing system" (SIGMOD 2005) and Balazinska's thesis (MIT, 2006).
"""

from app.availability.detector import FailureDetector, PeerStatus
from app.availability.node import Checkpoint, DPCNode
from app.availability.operators import Operator, Passthrough, WindowCount
from app.availability.outputlog import OutputLog, StreamView
from app.availability.permission import (
    PeerPermission,
    ReconciliationPermits,
    grant_peer_request,
)
from app.availability.placement import (
    PlacementError,
    ReplicaCandidate,
    ReplicaPlacement,
    place_replicas,
)
from app.availability.soutput import SOutput
from app.availability.states import IllegalTransition, NodeEvent, NodeState, transition
from app.availability.sunion import Bucket, DelayStrategy, SUnion
from app.availability.tuples import Kind, Message, Row
from app.availability.upstream import ReplicaView, Switch, UpstreamSelector, rank

__all__ = [
    "Bucket",
    "Checkpoint",
    "DPCNode",
    "DelayStrategy",
    "FailureDetector",
    "IllegalTransition",
    "Kind",
    "Message",
    "NodeEvent",
    "NodeState",
    "Operator",
    "OutputLog",
    "Passthrough",
    "PeerPermission",
    "PeerStatus",
    "PlacementError",
    "ReconciliationPermits",
    "ReplicaCandidate",
    "ReplicaPlacement",
    "ReplicaView",
    "Row",
    "SOutput",
    "SUnion",
    "StreamView",
    "Switch",
    "UpstreamSelector",
    "WindowCount",
    "grant_peer_request",
    "place_replicas",
    "rank",
    "transition",
]
