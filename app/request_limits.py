"""Checks on a request's body before any route sees it: its size and what its JSON holds.

A pure ASGI middleware, so that it runs for every route (present and future) without touching
them: a body over ``Settings.max_body_bytes`` is a 413 naming the limit, before it is read in
full; a JSON body holding a value no backend can store (``NaN``, ``Infinity``, ``1e309``, a NUL
in a string, absurd nesting) is a 422 naming the field, so free-form objects such as a
profile cannot carry one into the database. Python's ``json`` accepts those constants and
parses ``1e309`` to infinity, which is why they are looked for after parsing, where the path
to the value is known.
"""

from __future__ import annotations

import json
from email.message import Message
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as AsgiMessage

from app.errors import validation_body
from app.limits import json_problem

_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _is_json(content_type: str | None) -> bool:
    # As FastAPI decides to parse JSON: no content type, or a json / +json subtype.
    if not content_type:
        return True
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        status_code=413,
        content={
            "detail": f"the request body is larger than the limit of {limit} bytes "
            "(FEDLOAD_MAX_BODY_BYTES)",
            "field": "body",
        },
    )


class RequestLimits:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _too_large(self.max_body_bytes)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _too_large(self.max_body_bytes)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and _is_json(headers.get("content-type")):
            refusal = _refusal(body)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, _replay(body, receive), send)


def _refusal(body: bytes) -> JSONResponse | None:
    try:
        parsed: Any = json.loads(body)
    except json.JSONDecodeError:
        return None  # FastAPI answers malformed JSON with its 400, naming the position
    except (ValueError, RecursionError) as exc:
        # Valid syntax that Python will not parse: an integer of more than 4,300 digits, or
        # nesting deeper than the interpreter's recursion limit.
        return JSONResponse(
            status_code=400,
            content={"detail": f"unusable JSON body: {str(exc)[:200]}", "field": "body"},
        )
    found = json_problem(parsed)
    if found is None:
        return None
    where, what = found
    return JSONResponse(status_code=422, content=validation_body([(where or "body", what)]))


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> AsgiMessage:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
