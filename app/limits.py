"""Limits on the values fedload accepts from outside, and pure checks for them.

Shared by the API's field types (``app.api_types``), its body check (``app.request_limits``)
and federation files (``app.federation.document``), so a value is refused alike wherever it
comes in. Standard library only: federation files are read by the engine's simulators too.
"""

from __future__ import annotations

import math
import unicodedata
from datetime import UTC, datetime
from typing import Any

INT32_MAX = 2**31 - 1
MAX_NAME_CHARS = 128
MAX_LIST_ITEMS = 1000
MAX_JSON_OBJECT_BYTES = 64 * 1024
MAX_JSON_DEPTH = 16
# Prices, loads and durations: far above any real one, and small enough that the product of
# three (price x load x seconds, a payment) stays finite and fits a JSON response.
MAX_MAGNITUDE = 1e12
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, tzinfo=UTC)
# Published in the OpenAPI schema beside the validator (whose message says which character).
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"


def control_character(text: str) -> str | None:
    """The first control character in ``text`` (Unicode category Cc: NUL, tab, newline, DEL,
    C1), described for an error message, or None."""
    for position, char in enumerate(text):
        if unicodedata.category(char) == "Cc":
            return f"control character U+{ord(char):04X} at position {position}"
    return None


def utc_range_problem(value: datetime) -> str | None:
    """Why ``value`` (timezone-aware) is outside the range every backend and a year of term
    beyond it hold, or None."""
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        return (
            f"must lie between {EARLIEST.date()} and {LATEST.date()} in UTC; "
            f"got {value.isoformat()}"
        )
    return None


def json_problem(value: Any, path: str = "", depth: int = 0) -> tuple[str, str] | None:
    """(where, what) for the first value JSON storage cannot take: a non-finite number, a NUL
    in a string or key, or nesting deeper than MAX_JSON_DEPTH. ``where`` is a dotted path."""
    if depth > MAX_JSON_DEPTH:
        return path, f"nests deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, float) and not math.isfinite(value):
        return path, f"must be a finite number, not {value}"
    if isinstance(value, str) and "\x00" in value:
        return path, "must not contain a NUL character"
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return path or "body", "a key contains a NUL character"
            found = json_problem(item, where, depth + 1)
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = json_problem(item, f"{path}[{index}]", depth + 1)
            if found is not None:
                return found
    return None
