"""The admin UI: a separate FastAPI app mounted at /admin on the service.

Its own app so that its session cookie, CSRF checks, HTML error pages and security headers
apply to it alone, while it shares the service's settings and DB session factory (one session
per request, committed at the edge by ``app.auth.dependencies.get_session``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm.exc import StaleDataError
from starlette.middleware.sessions import SessionMiddleware

from app.admin import actions, pages
from app.admin.rendering import build_templates, render
from app.admin.security import (
    FRAGMENT_HEADER,
    CsrfRejected,
    SignInRefused,
    SignInRequired,
    safe_next,
)
from app.errors import DomainError
from app.settings import Settings

STATIC_DIR = Path(__file__).parent / "static"
SESSION_HOURS = 8

# Everything the pages need is served from /admin/static; nothing may come from elsewhere.
PAGE_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'self'; form-action 'self'"
)


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _wants_fragment(request: Request) -> bool:
    return FRAGMENT_HEADER in request.headers or "partial" in request.query_params


def _sign_in_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    if exc.redirect:
        return RedirectResponse(f"{_root(request)}/login?next={exc.next_path}", status_code=303)
    return PlainTextResponse("admin sign-in required", status_code=401)


def _csrf_rejected(request: Request, exc: Exception) -> Response:
    return render(
        request,
        "error.html",
        {
            "status": 403,
            "detail": "the form's CSRF token is missing or wrong; reload the page and try again",
        },
        status_code=403,
    )


def _sign_in_refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRefused)
    return render(
        request,
        "login.html",
        {"next": safe_next(request.query_params.get("next")), "error": exc.detail},
        status_code=exc.status_code,
    )


def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    if _wants_fragment(request):
        return PlainTextResponse(exc.detail, status_code=exc.status_code)
    return render(
        request,
        "error.html",
        {"status": exc.status_code, "detail": exc.detail},
        status_code=exc.status_code,
    )


def _stale(request: Request, exc: Exception) -> Response:
    return render(
        request,
        "error.html",
        {"status": 409, "detail": "the record changed meanwhile; go back, reload and retry"},
        status_code=409,
    )


async def _security_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    response = await call_next(request)
    response.headers.setdefault("Content-Security-Policy", PAGE_CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response


def build_admin_app(settings: Settings, session_factory: object) -> FastAPI:
    admin = FastAPI(title="fedload admin", docs_url=None, redoc_url=None, openapi_url=None)
    admin.state.settings = settings
    admin.state.session_factory = session_factory
    admin.state.templates = build_templates()
    admin.add_exception_handler(SignInRequired, _sign_in_required)
    admin.add_exception_handler(CsrfRejected, _csrf_rejected)
    admin.add_exception_handler(SignInRefused, _sign_in_refused)
    admin.add_exception_handler(DomainError, _domain_error)
    admin.add_exception_handler(StaleDataError, _stale)
    admin.middleware("http")(_security_headers)
    admin.add_middleware(
        SessionMiddleware,
        secret_key=settings.session_secret,
        session_cookie="fedload_admin",
        max_age=SESSION_HOURS * 3600,
        path="/admin",
        same_site="lax",
        https_only=settings.environment == "production",
    )
    admin.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    admin.include_router(pages.router)
    admin.include_router(actions.router)
    return admin


def _favicon() -> FileResponse:
    return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")


def mount_admin(app: FastAPI, settings: Settings) -> None:
    """Attach the admin UI under /admin."""
    app.mount("/admin", build_admin_app(settings, app.state.session_factory), name="admin")
    # Pages without an icon link (a report's own HTML, /docs) make browsers ask for this one;
    # answering it keeps their consoles free of 404s.
    app.add_api_route("/favicon.ico", _favicon, include_in_schema=False)
