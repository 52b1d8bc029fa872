"""Structured logs: one JSON object per line (or readable text), each with the request id.

``FEDLOAD_LOG_FORMAT=json|text`` chooses; ``fedload serve`` uses json unless told otherwise.
The request id lives in a context variable set by the request middleware, so every line
logged while a request is served (an error's traceback included) carries it.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["json", "text"]

request_id_var: ContextVar[str | None] = ContextVar("fedload_request_id", default=None)
# What a line's ``extra={"fields": {...}}`` adds to its JSON object.
FIELDS = "fields"
_HANDLER_NAME = "fedload"
# The request log replaces uvicorn's access log (one line per request, not two).
_SERVER_LOGGERS = ("uvicorn", "uvicorn.error")


def _request_id(record: logging.LogRecord) -> str | None:
    """The record's own request id (the request log's), else the request being served."""
    fields = getattr(record, FIELDS, None)
    if isinstance(fields, dict) and isinstance(fields.get("request_id"), str):
        return str(fields["request_id"])
    return request_id_var.get()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = _request_id(record)
        if request_id is not None:
            line["request_id"] = request_id
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        request_id = _request_id(record)
        return f"{text} [request_id={request_id}]" if request_id else text


def configure_logging(log_format: LogFormat, level: int = logging.INFO) -> None:
    """Send every log line of this process to stderr in ``log_format``. Idempotent."""
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _SERVER_LOGGERS:
        server = logging.getLogger(name)
        server.handlers.clear()
        server.propagate = True
    logging.getLogger("uvicorn.access").disabled = True
