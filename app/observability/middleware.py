"""One middleware for every request: its id, its metrics and its log line.

Pure ASGI (no BaseHTTPMiddleware), so it adds no task or buffering to the responses it sees.
The request id comes from ``X-Request-ID`` when the caller sent a sane one (so a proxy's id
follows the request through), else a new one; the response echoes it. The route is the
template (``/v1/contracts/{contract_id}``), never the raw path: one series per route, whatever
ids callers send.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logs import FIELDS, request_id_var
from app.observability.metrics import count_request

HEADER = b"x-request-id"
# Printable, no spaces or quotes: an id from outside goes into log lines and headers as is.
VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
UNMATCHED = "unmatched"
# The start of an error body kept for its log line.
ERROR_BODY_LIMIT = 4096

access_log = logging.getLogger("fedload.access")


def request_id_from(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == HEADER:
            given = value.decode("latin-1")
            if VALID_REQUEST_ID.match(given):
                return given
            break
    return uuid.uuid4().hex


def route_template(scope: Scope, root_before: str) -> str:
    """The matched route's template, with the prefix of any mount it lies under."""
    route = scope.get("route")
    if route is None:
        return UNMATCHED
    prefix = str(scope.get("root_path", ""))[len(root_before) :]
    if isinstance(route, Mount):  # its root_path already includes the mount's own path
        return prefix + "/{path}"
    return prefix + str(getattr(route, "path_format", UNMATCHED))


def _actor(scope: Scope) -> str | None:
    principal = scope.get("state", {}).get("principal")
    actor = getattr(principal, "actor", None)
    return actor if isinstance(actor, str) else None


def _error_detail(body: bytes) -> Any:
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(parsed, dict):
        return {k: parsed[k] for k in ("detail", "field") if k in parsed}
    return None


def _log(
    level: int, args: tuple[object, ...], fields: dict[str, Any], failure: Exception | None
) -> None:
    """The request's line, as ``access_log.log`` would make it but for the caller's file and
    line, which are always this module's: ``Logger.log`` walks the stack to find them
    (``findCaller``) at every request, and no formatter of ours shows them."""
    exc_info = None if failure is None else (type(failure), failure, failure.__traceback__)
    record = access_log.makeRecord(
        access_log.name,
        level,
        __file__,
        0,
        "%s %s %s %.1fms",
        args,
        exc_info,
        "__call__",
        {FIELDS: fields},
    )
    access_log.handle(record)


class RequestObservability:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope)
        token = request_id_var.set(request_id)
        scope.setdefault("state", {})  # one dict, shared with the app's request.state
        root_before = str(scope.get("root_path", ""))
        started = time.perf_counter()
        status = 500
        error_body = bytearray()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER]
                headers.append((HEADER, request_id.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and status >= 400:
                room = ERROR_BODY_LIMIT - len(error_body)
                if room > 0:
                    error_body.extend(message.get("body", b"")[:room])
            await send(message)

        failure: Exception | None = None
        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:  # logged with its traceback, then left to the server's handler
            failure = exc
            status = 500
            raise
        finally:
            seconds = time.perf_counter() - started
            route = route_template(scope, root_before)
            method = str(scope.get("method", ""))
            count_request(route, method, status, seconds)
            level = logging.ERROR if status >= 500 else logging.INFO
            if access_log.isEnabledFor(level):
                fields: dict[str, Any] = {
                    "request_id": request_id,
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 3),
                    "principal": _actor(scope),
                }
                if error_body:
                    fields["error"] = _error_detail(bytes(error_body))
                _log(level, (method, route, status, seconds * 1000), fields, failure)
            request_id_var.reset(token)
