"""API keys: 256-bit random tokens, stored only as their SHA-256 digest."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "fl_"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(key: str) -> str:
    # A slow password hash buys nothing for a 256-bit random token and would cost every request.
    return hashlib.sha256(key.encode()).hexdigest()


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def admin_for_key(given: str, admins: dict[str, str]) -> str | None:
    """The name of the admin whose key ``given`` is. Every key is compared, each in constant
    time, so the time taken says nothing about which admin (or none) matched."""
    found = None
    for name, key in admins.items():
        if same_secret(given, key):
            found = name
    return found
