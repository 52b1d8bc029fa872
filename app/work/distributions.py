"""Which Python distributions an agent runs fragments from (``fedload agent --fragments``).

Pure, shared by the node (which offers it accepts), the heartbeat (what the registry is told)
and the Spark host (what it refuses to run). fedload itself is always allowed: its code already
runs in the agent, so refusing its fragments would protect nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

OWN_DISTRIBUTION = "fedload"
# The distributions an agent allows, comma-separated (``--fragments`` reads it, and the agent
# sets it for its host from the options it runs with).
FRAGMENTS_ENV = "FEDLOAD_FRAGMENTS"


def canonical(name: str) -> str:
    """A distribution's name as packaging compares them (``My_Dist`` is ``my-dist``)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def allowed_distributions(given: Iterable[str]) -> frozenset[str]:
    """What an agent allows: the distributions its operator named, and always fedload."""
    return frozenset({OWN_DISTRIBUTION, *(canonical(d) for d in given if d.strip())})


def parse_list(text: str | None) -> list[str]:
    """``FEDLOAD_FRAGMENTS``'s ``a,b`` (spaces allowed) as names."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def is_allowed(distribution: str | None, allowed: Collection[str]) -> bool:
    if not distribution:
        return False
    return canonical(distribution) in allowed_distributions(allowed)
