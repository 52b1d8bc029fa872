"""Constrained field types shared by every request schema, and the limits behind them.

One home for "what a value may be" at the API's edge, so that a bad value is a 422 naming its
field instead of a database error (a 500) further in. Each limit has a reason:

- ids and versions are PostgreSQL ``integer`` columns (32-bit signed);
- numbers are finite and never booleans (``{"load": false}`` is not 0, ``1e309`` is not a load);
- strings carry no NUL (PostgreSQL text and JSON refuse it) and names no control characters;
- times convert to UTC inside years 1900..9998, so adding a contract's default year of term
  never leaves Python's ``datetime`` range;
- lists and free-form JSON objects have a size bound, so one request cannot make the service
  store megabytes or look up tens of thousands of rows.

The request body limit (``FEDLOAD_MAX_BODY_BYTES``) is enforced before parsing, in
``app.request_limits``; these bounds hold below it.
"""

from __future__ import annotations

import json
import math
import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Path
from pydantic import AfterValidator, AwareDatetime, Field, Strict

INT32_MAX = 2**31 - 1
MAX_NAME_CHARS = 128
MAX_TEXT_CHARS = 1024
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


def _no_control_characters(text: str) -> str:
    found = control_character(text)
    if found is not None:
        raise ValueError(f"must not contain a {found}")
    return text


def _in_utc_range(value: datetime) -> datetime:
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        raise ValueError(
            f"must lie between {EARLIEST.date()} and {LATEST.date()} in UTC; "
            f"got {value.isoformat()}"
        )
    return utc


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


def _bounded_json_object(value: dict[str, Any]) -> dict[str, Any]:
    found = json_problem(value)
    if found is not None:
        where, what = found
        raise ValueError(f"{where}: {what}")
    size = len(json.dumps(value, separators=(",", ":")))
    if size > MAX_JSON_OBJECT_BYTES:
        raise ValueError(f"is {size} bytes as JSON; at most {MAX_JSON_OBJECT_BYTES} are allowed")
    return value


# An integer a PostgreSQL ``integer`` column holds; never a boolean or a float.
RowId = Annotated[int, Strict(), Field(ge=1, le=INT32_MAX)]
Version = Annotated[int, Strict(), Field(ge=0, le=INT32_MAX)]
Count = Annotated[int, Strict(), Field(ge=0, le=INT32_MAX)]

# A real number: finite, and never a boolean (strict: an integer is still a number).
NonNegative = Annotated[float, Strict(), Field(ge=0, le=MAX_MAGNITUDE, allow_inf_nan=False)]
Positive = Annotated[float, Strict(), Field(gt=0, le=MAX_MAGNITUDE, allow_inf_nan=False)]

# A reference to something by name (a participant, a task, a fragment kind, a replica): looked
# up, never stored as given, so only its length and characters are bounded here.
NameRef = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME_CHARS, json_schema_extra={"pattern": NO_CONTROL}),
    AfterValidator(_no_control_characters),
]
# Free text that is stored (an endpoint URL, ...): bounded, no NUL, no control characters.
Text = Annotated[
    str,
    Field(max_length=MAX_TEXT_CHARS, json_schema_extra={"pattern": NO_CONTROL}),
    AfterValidator(_no_control_characters),
]
# Stored in a ``String(255)`` column (an agent's endpoint).
ShortText = Annotated[
    str,
    Field(max_length=255, json_schema_extra={"pattern": NO_CONTROL}),
    AfterValidator(_no_control_characters),
]
# A free-form JSON object the registry stores (a profile, a cost model, fragment parameters).
JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded_json_object)]
# A point in time with its offset, inside the range every backend and ``datetime`` hold.
Timestamp = Annotated[AwareDatetime, AfterValidator(_in_utc_range)]


# Path parameters: a row id, and a name (a participant, a task, a fragment).
PathId = Annotated[int, Path(ge=1, le=INT32_MAX, description="A row id.")]
PathName = Annotated[
    str, Path(min_length=1, max_length=MAX_NAME_CHARS, pattern=NO_CONTROL, description="A name.")
]
