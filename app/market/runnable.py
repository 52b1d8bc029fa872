"""Who may be offered a Python fragment: a partner whose agent runs its distribution.

A SQL fragment is data any partner runs as it is; a Python fragment is code from a
distribution, which a host runs only when its operator allows it (the agent advertises the
distributions it may run in its heartbeat). The registry refuses an offer of such a task to a
partner that did not advertise the distribution, and a giver's agent, told so, offers the task
elsewhere. Pure: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any


def canonical(name: str) -> str:
    """A distribution's name as packaging compares them (``Netmon_Fragments`` ==
    ``netmon-fragments``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_distribution(work: Mapping[str, Any] | None) -> str | None:
    """The distribution a task's Python fragment comes from (None: it runs no Python)."""
    if not work or work.get("python") is None:
        return None
    distribution = work.get("distribution")
    return str(distribution) if distribution else None


def may_run(distribution: str | None, advertised: Collection[str] | None) -> bool:
    """Whether a partner that advertised ``advertised`` (None: nothing) may host the task."""
    if distribution is None:
        return True
    return canonical(distribution) in {canonical(d) for d in advertised or ()}


def refused_task(field: str | None, tasks: Sequence[str], replicas: Sequence[str]) -> str | None:
    """The task an offer's refusal names by its field (``tasks[1]``, ``replicas[0]``)."""
    match = re.fullmatch(r"(tasks|replicas)\[(\d+)\]", field or "")
    if match is None:
        return None
    listed = tasks if match.group(1) == "tasks" else replicas
    index = int(match.group(2))
    return listed[index] if index < len(listed) else None
