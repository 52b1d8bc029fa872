"""Entity tags for GETs of one resource: ``If-None-Match`` with the current tag gets 304.

The tag is a digest of the representation itself, so it changes exactly when the client would
see a different body (a contract's status, a task's host or load), whatever changed it. An
agent polling a task or a contract then gets a bodiless 304 while nothing moved.
"""

from __future__ import annotations

import hashlib

from fastapi import Request, Response
from pydantic import BaseModel

NOT_MODIFIED: dict[int | str, dict[str, str]] = {
    304: {"description": "Not modified: the `If-None-Match` tag is the current `ETag`."}
}


def entity_tag(model: BaseModel) -> str:
    digest = hashlib.sha256(model.model_dump_json().encode()).hexdigest()[:32]
    return f'"{digest}"'


def _matches(if_none_match: str, tag: str) -> bool:
    # Weak comparison (RFC 9110 13.1.2): W/ prefixes do not matter for If-None-Match.
    candidates = [c.strip().removeprefix("W/") for c in if_none_match.split(",")]
    return "*" in candidates or tag in candidates


def conditional(request: Request, response: Response, model: BaseModel) -> BaseModel | Response:
    """``model`` with its ``ETag``, or 304 when the client already holds this version."""
    tag = entity_tag(model)
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and _matches(if_none_match, tag):
        return Response(status_code=304, headers={"ETag": tag})
    response.headers["ETag"] = tag
    return model
