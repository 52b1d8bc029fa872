"""Copies of a task: the primary and its replicas, as load the market may move. Pure.

A task asking for k replicas runs as k + 1 copies (DESIGN.md, "Availability"): copy 0 is the
primary, copies 1..k its replicas. Every copy is load like any other: it counts in its host's cost
and is paid for hop by hop (Balazinska et al., SIGMOD 2005, run replicas on distinct nodes; the
NSDI 2004 mechanism prices them). Two rules set copies apart from independent tasks:

- a participant never hosts two copies of one task, since one crash would take both: the giver
  never proposes such a move and the receiver refuses one (``receivable``);
- a replica only travels over contracts whose availability terms allow replica hosting; primaries
  travel over any contract, so a federation without replicas trades exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

Item = tuple[str, float]  # (copy name, load), as in app.market.bpm

# Replica copy names are "<task>#r<i>": "#" cannot appear in a task name (NAME_PATTERN), so a
# copy's name never collides with another task's.
REPLICA_MARK = "#r"


@dataclass(frozen=True)
class Copy:
    task: str
    index: int = 0  # 0: the primary; i >= 1: replica i

    @property
    def is_replica(self) -> bool:
        return self.index > 0

    @property
    def name(self) -> str:
        return self.task if self.index == 0 else f"{self.task}{REPLICA_MARK}{self.index}"


def copies_of(task: str, replicas: int) -> list[Copy]:
    """The primary and ``replicas`` replicas of ``task``, primary first."""
    return [Copy(task, i) for i in range(replicas + 1)]


def may_travel(is_replica: bool, contracts_allow_replicas: Iterable[bool]) -> bool:
    """Whether a copy may go over every contract of a path (a primary always may)."""
    return not is_replica or all(contracts_allow_replicas)


def receivable(
    offered: Sequence[Item], task_of: Callable[[str], str], held: Collection[str]
) -> list[Item]:
    """The receiver's side: the offered copies it may host, in the offer's order.

    ``held`` are the tasks the receiver already hosts a copy of; a copy of one of those is
    refused, and of two copies of one task in the same offer only the first could be taken.
    """
    seen = set(held)
    out: list[Item] = []
    for name, size in offered:
        task = task_of(name)
        if task in seen:
            continue
        seen.add(task)
        out.append((name, size))
    return out


def second_copies(hosted: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """For a check of the invariant: participant -> tasks it hosts more than one copy of,
    from (participant, task) pairs, one per hosted copy."""
    counts: dict[tuple[str, str], int] = {}
    for pair in hosted:
        counts[pair] = counts.get(pair, 0) + 1
    out: dict[str, list[str]] = {}
    for (who, task), n in sorted(counts.items()):
        if n > 1:
            out.setdefault(who, []).append(task)
    return out
