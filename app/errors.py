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
