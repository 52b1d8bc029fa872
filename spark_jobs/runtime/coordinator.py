"""The registry's side of a movement, as the runtime sees it.

The runtime never imports the ORM. The registry (app/, ``Movement`` and ``Task.lease_epoch``)
implements ``MovementCoordinator``; ``InMemoryCoordinator`` is the same contract for tests,
benchmarks and single-process demos.

Contract:
- ``prepare`` records a movement as prepared and returns it with the epoch the target will hold
  if it commits (current epoch + 1). It refuses when ``source`` is not the current host or
  another movement of the fragment is still prepared (one move in flight per fragment).
- ``commit`` makes the target the host and the new epoch current, atomically; it is the only
  step that changes the host. Committing an aborted movement fails.
- ``abort`` closes a prepared movement; host and epoch stay as they were. Idempotent.
- ``current_epoch``/``host`` read the committed state.
So at any instant exactly one participant is the host, whatever crashes between the steps.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Protocol


class MovementRefused(RuntimeError):
    """prepare/commit refused: wrong source, a move already in flight, or not prepared."""


@dataclass(frozen=True)
class PreparedMove:
    movement_id: int
    fragment: str
    source: str
    target: str
    epoch: int
    reason: str


class MovementCoordinator(Protocol):
    def prepare(self, fragment: str, source: str, target: str, reason: str) -> PreparedMove: ...

    def commit(self, movement_id: int) -> int: ...

    def abort(self, movement_id: int, why: str) -> None: ...

    def current_epoch(self, fragment: str) -> int: ...

    def host(self, fragment: str) -> str: ...


@dataclass
class _Record:
    move: PreparedMove
    status: str = "prepared"
    why: str = ""


class InMemoryCoordinator:
    def __init__(self, hosts: dict[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[str, str] = dict(hosts or {})
        self._epochs: dict[str, int] = dict.fromkeys(self._hosts, 0)
        self._moves: dict[int, _Record] = {}
        self._ids = itertools.count(1)

    def place(self, fragment: str, host: str) -> None:
        """Register a fragment at its first host (epoch 0)."""
        with self._lock:
            self._hosts[fragment] = host
            self._epochs.setdefault(fragment, 0)

    def prepare(self, fragment: str, source: str, target: str, reason: str) -> PreparedMove:
        with self._lock:
            if self._hosts.get(fragment) != source:
                raise MovementRefused(
                    f"{fragment} is hosted by {self._hosts.get(fragment)!r}, not {source!r}"
                )
            if source == target:
                raise MovementRefused(f"{fragment}: source and target are both {source!r}")
            if any(
                r.status == "prepared" and r.move.fragment == fragment for r in self._moves.values()
            ):
                raise MovementRefused(f"{fragment} already has a movement in flight")
            move = PreparedMove(
                next(self._ids), fragment, source, target, self._epochs[fragment] + 1, reason
            )
            self._moves[move.movement_id] = _Record(move)
            return move

    def commit(self, movement_id: int) -> int:
        with self._lock:
            record = self._moves[movement_id]
            if record.status != "prepared":
                raise MovementRefused(f"movement {movement_id} is {record.status}")
            record.status = "committed"
            self._hosts[record.move.fragment] = record.move.target
            self._epochs[record.move.fragment] = record.move.epoch
            return record.move.epoch

    def abort(self, movement_id: int, why: str) -> None:
        with self._lock:
            record = self._moves[movement_id]
            if record.status == "prepared":
                record.status = "aborted"
                record.why = why

    def current_epoch(self, fragment: str) -> int:
        with self._lock:
            return self._epochs[fragment]

    def host(self, fragment: str) -> str:
        with self._lock:
            return self._hosts[fragment]

    def status(self, movement_id: int) -> str:
        with self._lock:
            return self._moves[movement_id].status
