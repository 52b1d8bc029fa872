"""The audit log's hash chain: each entry's hash covers its fields and the previous entry's hash.

The hash is SHA-256 over a canonical JSON of the entry (sorted keys, no whitespace, UTF-8), so
any change to a stored entry (its fields, the participants it concerns, or its place in the
chain) changes the hash that the next entry holds, and ``fedload audit verify`` names the first
entry where the recomputed chain and the stored one part. The format is versioned (``"v"``):
migration 0008 hashes the entries written before the chain with this same version 1.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

FORMAT_VERSION = 1
# The previous hash of the first entry: no entry comes before it.
GENESIS = "0" * 64


@dataclass(frozen=True)
class ChainFields:
    """What an entry's hash covers, in the form the database hands back."""

    id: int
    at: datetime
    actor: str
    action: str
    entity_type: str
    entity_id: int | None
    detail: dict[str, Any]
    subjects: Iterable[int]


def canonical_time(at: datetime) -> str:
    """UTC, microseconds: what both backends store and return unchanged."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def as_stored(detail: dict[str, Any] | None) -> dict[str, Any]:
    """``detail`` as it reads back from a JSON column (tuples become lists, keys strings), so the
    hash computed before the insert equals the one recomputed from the row."""
    stored: dict[str, Any] = json.loads(canonical_json(detail or {}))
    return stored


def entry_hash(fields: ChainFields, prev_hash: str) -> str:
    document = {
        "v": FORMAT_VERSION,
        "id": fields.id,
        "at": canonical_time(fields.at),
        "actor": fields.actor,
        "action": fields.action,
        "entity_type": fields.entity_type,
        "entity_id": fields.entity_id,
        "detail": fields.detail,
        "subjects": sorted(set(fields.subjects)),
        "prev_hash": prev_hash,
    }
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()
