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
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Path
from pydantic import AfterValidator, AwareDatetime, Field, Strict

from app.limits import (
    INT32_MAX,
    MAX_JSON_OBJECT_BYTES,
    MAX_MAGNITUDE,
    MAX_NAME_CHARS,
    NO_CONTROL,
    control_character,
    json_problem,
    utc_range_problem,
)


def _no_control_characters(text: str) -> str:
    found = control_character(text)
    if found is not None:
        raise ValueError(f"must not contain a {found}")
    return text


def _in_utc_range(value: datetime) -> datetime:
    problem = utc_range_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value.astimezone(UTC)


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
# Free text stored in a ``String(255)`` column (an agent's endpoint): no control characters.
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
