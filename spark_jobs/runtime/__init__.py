"""The fragment runtime: SUnion source, SOutput sink, Flight transport, the movement path."""

from spark_jobs.runtime.coordinator import (
    InMemoryCoordinator,
    MovementCoordinator,
    MovementRefused,
    PreparedMove,
)
from spark_jobs.runtime.host import (
    FragmentRuntime,
    FragmentSpec,
    FragmentStats,
    StreamRef,
    stop_after_commit,
)
from spark_jobs.runtime.movement import (
    AlreadyShipped,
    CheckpointSource,
    LiveHost,
    MoveAborted,
    MoveInDoubt,
    NoCheckpoint,
    Relocation,
    RemoteHost,
    ResumeFailed,
    relocate,
)
from spark_jobs.runtime.soutput import SOutput
from spark_jobs.runtime.sunion import SUnionDataSource
from spark_jobs.runtime.transport import (
    FencedError,
    PackedCheckpoint,
    StreamClient,
    StreamServer,
    TransferError,
    publish,
)

__all__ = [
    "AlreadyShipped",
    "CheckpointSource",
    "FencedError",
    "FragmentRuntime",
    "FragmentSpec",
    "FragmentStats",
    "InMemoryCoordinator",
    "LiveHost",
    "MoveAborted",
    "MoveInDoubt",
    "MovementCoordinator",
    "MovementRefused",
    "NoCheckpoint",
    "PackedCheckpoint",
    "PreparedMove",
    "Relocation",
    "RemoteHost",
    "ResumeFailed",
    "SOutput",
    "SUnionDataSource",
    "StreamClient",
    "StreamRef",
    "StreamServer",
    "TransferError",
    "publish",
    "relocate",
    "stop_after_commit",
]
