"""Per-owner task names: a task's full name is ``<owner>.<local>``.

Task names are the registry's keys in every URL, offer and movement, and they are unique across
the federation. Were they free-form, declaring a name another participant holds would answer 409
and tell the caller that the other participant's task exists. Qualifying each name by its owner
makes names of different owners disjoint, so a 409 can only concern the caller's own tasks.

The local part has no ``.``: participant names may contain dots, and with a dot-free local part a
full name has exactly one owner (everything before its last dot). Otherwise ``A`` declaring
``A.b.c`` could still collide with participant ``A.b``'s task ``c``.
"""

from __future__ import annotations

import re

LOCAL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def naming_error(name: str, owner: str) -> str | None:
    """Why ``owner`` may not declare a task called ``name`` (None: it may). The message depends
    on the name and the owner only, never on which tasks exist."""
    local = name[len(owner) + 1 :] if name.startswith(owner + ".") else None
    if local is None:
        return (
            f"a task's name is '<owner>.<local name>': yours must start with {owner + '.'!r} "
            f"(e.g. {owner + '.' + name.rpartition('.')[2]!r}), got {name!r}"
        )
    if not LOCAL_PATTERN.fullmatch(local):
        return (
            f"the local part of {name!r} after {owner + '.'!r} must be letters, digits, '_' or "
            f"'-' (no '.'), starting with a letter or digit"
        )
    return None
