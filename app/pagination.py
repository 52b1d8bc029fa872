"""Keyset pagination for every list endpoint: ``limit`` and an opaque ``cursor``.

A list answers at most ``limit`` items (default 100, at most 500) as a JSON array, as before,
so clients that read one page keep working; when more follow, the response carries
``Link: </v1/...?limit=L&cursor=C>; rel="next"`` (RFC 8288). The cursor is the sort key of the
last item sent, so a walk sees each item exactly once even while rows are added, and a page
costs one index range scan however deep it is (no OFFSET).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

from fastapi import Query, Request, Response

from app.errors import InvalidInput

DEFAULT_LIMIT = 100
MAX_LIMIT = 500

Key = tuple[int | str, ...]
Row = TypeVar("Row")


@dataclass(frozen=True)
class PageRequest:
    list_name: str
    limit: int
    # The sort key of the last item the client has seen; None for the first page.
    after: Key | None

    @property
    def after_value(self) -> Any:
        """The key of a list sorted by one column (an id): its value, or None."""
        return None if self.after is None else self.after[0]

    @property
    def fetch(self) -> int:
        """Rows to ask the database for: one more than a page tells whether another follows."""
        return self.limit + 1


def encode_cursor(list_name: str, key: Key) -> str:
    raw = json.dumps({"list": list_name, "after": list(key)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(list_name: str, cursor: str, key_types: tuple[type, ...]) -> Key:
    problem = "query.cursor: not a cursor of this list; pass the one from the previous Link"
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise InvalidInput(problem, field="query.cursor") from exc
    after = data.get("after") if isinstance(data, dict) else None
    if (
        data.get("list") != list_name
        or not isinstance(after, list)
        or len(after) != len(key_types)
        # bool is an int to Python, never to the database
        or not all(
            isinstance(v, t) and not isinstance(v, bool)
            for v, t in zip(after, key_types, strict=True)
        )
        or any(isinstance(v, int) and not -(2**31) <= v < 2**31 for v in after)
        or any(isinstance(v, str) and (len(v) > 256 or "\x00" in v) for v in after)
    ):
        raise InvalidInput(problem, field="query.cursor")
    return tuple(after)


def page_request(
    list_name: str, *key_types: type
) -> Callable[..., Coroutine[Any, Any, PageRequest]]:
    """A dependency reading ``limit`` and ``cursor`` for the list called ``list_name``, whose
    sort key has values of ``key_types`` (a forged cursor is a 422, never a database error)."""

    # A coroutine: FastAPI would run a sync one on a worker thread, which costs more than this.
    async def dependency(
        limit: int = Query(
            DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"Items per page (1-{MAX_LIMIT})."
        ),
        cursor: str | None = Query(
            None,
            max_length=512,
            description='Opaque: from the previous page\'s `Link: <...>; rel="next"` header.',
        ),
    ) -> PageRequest:
        after = None if cursor is None else decode_cursor(list_name, cursor, key_types)
        return PageRequest(list_name=list_name, limit=limit, after=after)

    return dependency


def paginate(
    rows: Sequence[Row],
    request: PageRequest,
    http_request: Request,
    response: Response,
    key: Callable[[Row], Key],
) -> list[Row]:
    """The page to send (at most ``limit`` rows), with a ``Link`` to the next one if any."""
    shown = list(rows[: request.limit])
    if len(rows) > request.limit and shown:
        params = [(k, v) for k, v in http_request.query_params.multi_items() if k != "cursor"]
        params = [(k, v) for k, v in params if k != "limit"]
        params += [("limit", str(request.limit))]
        params += [("cursor", encode_cursor(request.list_name, key(shown[-1])))]
        response.headers["Link"] = f'<{http_request.url.path}?{urlencode(params)}>; rel="next"'
    return shown
