"""Jinja2 templates for the admin UI, and rendering a whole page or only its live region.

Every page template fills a ``live`` block. The browser polls the page's own URL with
``?partial=live`` and swaps the returned region in, so the data on screen and the data the live
update shows come from one template and cannot drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from app.admin import charts
from app.admin.security import CSRF_FIELD, csrf_token, is_signed_in

TEMPLATES_DIR = Path(__file__).parent / "templates"
NO_STORE = {"Cache-Control": "no-store"}


def fmt_time(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S")


def ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "never"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    if seconds < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def fmt_duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "—"
    seconds = (end - start).total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def build_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
    env = templates.env
    env.filters.update(ts=fmt_time, ago=ago, num=num)
    env.globals.update(load_bar=charts.load_bar, duration=fmt_duration, csrf_field=CSRF_FIELD)
    return templates


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> Response:
    templates: Jinja2Templates = request.app.state.templates
    partial = request.query_params.get("partial") == "live"
    full = {
        "request": request,
        # A one-shot message after an action; a background poll must not consume it.
        "flash": None if partial else request.session.pop("flash", None),
        "csrf_token": csrf_token(request),
        "signed_in": is_signed_in(request),
        "root": request.scope.get("root_path", "").rstrip("/"),
        "path": request.url.path,
        "now": datetime.now(UTC),
        **context,
    }
    if partial:
        template = templates.get_template(name)
        html = "".join(template.blocks["live"](template.new_context(full)))
        return HTMLResponse(html, status_code=status_code, headers=NO_STORE)
    return templates.TemplateResponse(
        request, name, full, status_code=status_code, headers=NO_STORE
    )
