"""Admin sign-in, the session cookie and CSRF tokens.

The session is Starlette's signed cookie (itsdangerous, keyed by FEDLOAD_SESSION_SECRET). It
holds the admin's name and a fingerprint of that admin's key rather than a bare "signed in"
flag, so rotating (or removing) an admin's key signs that admin's sessions out. Actions are
audited under the signed-in admin's name. Every form carries the session's CSRF token; a POST
without it is refused before anything is read from the database.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.auth.keys import admin_for_key, hash_api_key, same_secret
from app.auth.principal import Principal, admin_named
from app.participants import repository as participants
from app.settings import Settings

CSRF_FIELD = "csrf_token"
FRAGMENT_HEADER = "x-fedload-fragment"


class SignInRequired(Exception):
    """No valid admin session. Pages redirect to the sign-in form; fragments and POSTs get 401."""

    def __init__(self, next_path: str, redirect: bool) -> None:
        super().__init__("admin sign-in required")
        self.next_path = next_path
        self.redirect = redirect


class CsrfRejected(Exception):
    """A form arrived without the session's CSRF token."""


class SignInRefused(Exception):
    def __init__(self, detail: str, status_code: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status_code = status_code


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _fingerprint(settings: Settings, name: str, key: str) -> str:
    return hmac.new(
        settings.session_secret.encode(), f"{name}:{key}".encode(), hashlib.sha256
    ).hexdigest()[:32]


def csrf_token(request: Request) -> str:
    """The session's CSRF token, created on first use (the sign-in form needs one too)."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


def signed_in_admin(request: Request) -> Principal | None:
    """The admin this browser session belongs to, while that admin's key is unchanged."""
    settings = settings_of(request)
    given, name = request.session.get("admin"), request.session.get("admin_name")
    if not (isinstance(given, str) and isinstance(name, str)) or name not in settings.admins:
        return None
    if not same_secret(given, _fingerprint(settings, name, settings.admins[name])):
        return None
    return admin_named(name)


def is_signed_in(request: Request) -> bool:
    return signed_in_admin(request) is not None


def sign_in(request: Request, session: Session, key: str) -> None:
    """Open an admin session for an admin key; refuse participants' keys and anything else."""
    settings = settings_of(request)
    name = admin_for_key(key, settings.admins) if key else None
    if name is not None:
        request.session.clear()
        request.session["admin"] = _fingerprint(settings, name, settings.admins[name])
        request.session["admin_name"] = name
        # A fresh token after sign-in: one seen before it (on a shared screen) is now worthless.
        request.session["csrf"] = secrets.token_urlsafe(32)
        return
    if key and participants.get_by_key_hash(session, hash_api_key(key)) is not None:
        raise SignInRefused(
            "that is a participant's API key; the admin UI opens only with the admin key", 403
        )
    raise SignInRefused("unknown key: sign in with the admin key (FEDLOAD_ADMIN_KEY)", 401)


def sign_out(request: Request) -> None:
    request.session.clear()


def safe_next(value: str | None) -> str:
    """Only an admin page may follow sign-in: never another host, never a scheme-relative URL."""
    if value and value.startswith("/admin") and not value.startswith("//") and "\\" not in value:
        return value
    return "/admin/"


def _is_fragment(request: Request) -> bool:
    return FRAGMENT_HEADER in request.headers or "partial" in request.query_params


def require_admin(request: Request) -> Principal:
    admin = signed_in_admin(request)
    if admin is not None:
        request.state.principal = admin  # for the request log
        return admin
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    redirect = request.method == "GET" and not _is_fragment(request)
    raise SignInRequired(quote(path, safe="/?=&"), redirect)


AdminSession = Annotated[Principal, Depends(require_admin)]


async def _checked_form(request: Request) -> dict[str, str]:
    form = await request.form()
    given = form.get(CSRF_FIELD)
    expected = request.session.get("csrf")
    if not (isinstance(given, str) and given and isinstance(expected, str)):
        raise CsrfRejected()
    if not same_secret(given, expected):
        raise CsrfRejected()
    return {k: v for k, v in form.items() if isinstance(v, str)}


async def admin_form(request: Request) -> dict[str, str]:
    """A POSTed form from a signed-in admin carrying the session's CSRF token."""
    require_admin(request)
    return await _checked_form(request)


AdminForm = Annotated[dict[str, str], Depends(admin_form)]


async def login_form(request: Request) -> dict[str, str]:
    """The sign-in form: no admin session yet, but it must carry the pre-session CSRF token,
    so another site cannot sign a victim's browser in (login CSRF)."""
    return await _checked_form(request)


LoginForm = Annotated[dict[str, str], Depends(login_form)]
