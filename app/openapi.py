"""The published OpenAPI says what the API really answers on error.

FastAPI documents every 422 as ``HTTPValidationError`` (``detail`` a list), but fedload renders
every error, validation included, as ``{"detail": str, "field": str | null}`` (``errors``
added for a 422; ``app.main._validation_error``). This replaces that schema with the real one
and documents, on every /v1 operation, the error statuses any of them can answer: 401 (no or
an unknown key), 403, 404 and 409 (domain errors), 422 (validation), and for operations with a
body 400 (malformed JSON) and 413 (over ``FEDLOAD_MAX_BODY_BYTES``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["detail", "field"],
    "properties": {
        "detail": {"type": "string", "description": "What is wrong, and where."},
        "field": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "description": "The offending field (dotted path), 'body', a header, or null.",
        },
    },
}
VALIDATION_ERROR_SCHEMA: dict[str, Any] = {
    "title": "HTTPValidationError",
    "type": "object",
    # ``errors`` comes with schema validation; a service's own 422 (an unknown partner, ...)
    # names one field and has none.
    "required": ["detail", "field"],
    "properties": {
        **ERROR_SCHEMA["properties"],
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
            "description": "Every problem found, the first of them also in detail and field.",
        },
    },
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_ALWAYS = {
    "401": "Missing or unknown API key.",
    "403": "The key may not do this (an admin-only route, a suspended participant, ...).",
    "404": "No such record, or not one you may see.",
    "409": "Conflicts with the current state (a stale version, a rule such as one live "
    "contract per pair); the message says which.",
}
_WITH_BODY = {
    "400": "Malformed JSON body.",
    "413": "The request body is larger than the service accepts (FEDLOAD_MAX_BODY_BYTES).",
}


def _document(operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    codes = dict(_ALWAYS)
    if "requestBody" in operation:
        codes.update(_WITH_BODY)
    for code, description in codes.items():
        response = responses.setdefault(code, {"description": description})
        response["content"] = {"application/json": {"schema": _ERROR_REF}}
    if "422" in responses or operation.get("parameters") or "requestBody" in operation:
        responses["422"] = {
            "description": "Validation error: the first problem in detail and field.",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
            },
        }


def publish_error_responses(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["Error"] = ERROR_SCHEMA
        components["HTTPValidationError"] = VALIDATION_ERROR_SCHEMA
        components.pop("ValidationError", None)
        for path, methods in schema.get("paths", {}).items():
            if not path.startswith("/v1/"):
                continue
            for operation in methods.values():
                _document(operation)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
