"""Delta checkpoints: the difference between two JSON-able state snapshots, and its application.

Passive standby ships the fragment's checkpoint to its backup every few hundred milliseconds;
most of the state (closed keys of open windows, older windows) has not changed since the last
one, so shipping only what changed is much smaller (issue 5: "delta where possible"). Nested
dicts are compared key by key, so a counter that changed in one window of many costs one entry.
"""

from __future__ import annotations

from typing import Any

Patch = dict[str, Any]


def diff(old: dict[str, Any], new: dict[str, Any]) -> Patch:
    """A patch turning ``old`` into ``new`` (both dicts with string keys, JSON-able)."""
    patch: Patch = {}
    drop = [key for key in old if key not in new]
    if drop:
        patch["drop"] = drop
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = diff(before, value)
            if inner:
                patch.setdefault("sub", {})[key] = inner
        elif key not in old or before != value:
            patch.setdefault("set", {})[key] = value
    return patch


def apply(state: dict[str, Any], patch: Patch) -> dict[str, Any]:
    """``state`` with ``patch`` applied (a new dict; ``state`` is not changed)."""
    out = dict(state)
    for key in patch.get("drop", []):
        out.pop(key, None)
    for key, value in patch.get("set", {}).items():
        out[key] = value
    for key, inner in patch.get("sub", {}).items():
        base = out.get(key)
        if not isinstance(base, dict):
            raise ValueError(f"delta: {key!r} is not a dict in the base state, cannot patch it")
        out[key] = apply(base, inner)
    return out
