"""Domain errors. Each carries its HTTP status and, where known, the offending field.

Services raise these; the API renders every one of them as ``{"detail": ..., "field": ...}``
through a single exception handler, so no service ever imports FastAPI.
"""

from __future__ import annotations


class DomainError(Exception):
    status_code = 400

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class InvalidInput(DomainError):
    status_code = 422


class Unauthorized(DomainError):
    status_code = 401


class Forbidden(DomainError):
    status_code = 403


class NotFound(DomainError):
    status_code = 404


class Conflict(DomainError):
    status_code = 409


def validation_body(errors: list[tuple[str, str]]) -> dict[str, object]:
    """The one shape of a 422: the first error in ``detail`` and ``field``, all in ``errors``.

    The request validation handler and the body checks in ``app.request_limits`` both render
    through here, so the published ValidationError schema matches every 422 the API sends."""
    field, message = errors[0]
    return {
        "detail": f"{field}: {message}",
        "field": field,
        "errors": [{"field": f, "message": m} for f, m in errors],
    }
