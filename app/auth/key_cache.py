"""Recently verified API keys, so that most requests authenticate without a query.

Looking a key up cost a query on every request: about a sixth of a request's CPU in the
service (``bench/api/cpu_profile.py``). A key a participant used a moment ago is remembered for
``FEDLOAD_KEY_CACHE_SECONDS`` (1 s by default; 0 turns the cache off), per worker process.

What it may cost: a change of a participant's status or keys (suspension, rotation,
``revoke_old``) empties the cache of the worker that made it when its transaction commits, so
that worker refuses a suspended participant's or a revoked key at once; every other worker (or
process sharing the database) may accept it for up to the cache's lifetime. Only a current key
of an active participant is remembered: unknown keys, suspended participants and keys in their
grace period after a rotation are looked up every time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.models import Participant

# sessionmaker info: the cache of the sessions' application (``create_app`` puts it there).
SESSION_INFO_KEY = "fedload.auth.key_cache"
_CHANGED = "fedload.auth.credentials_changed"
# What decides whether a key is accepted, and as whom.
CREDENTIAL_FIELDS = ("status", "api_key_hash", "previous_key_hash", "previous_key_expires_at")
# A bound on memory: far more participants than a federation has.
MAX_ENTRIES = 10_000


class KeyCache:
    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.seconds > 0

    def get(self, key_hash: str) -> Principal | None:
        if not self.enabled:
            return None
        found = self._entries.get(key_hash)
        if found is None:
            return None
        until, principal = found
        if self._clock() >= until:
            with self._lock:
                self._entries.pop(key_hash, None)
            return None
        return principal

    def put(self, key_hash: str, principal: Principal) -> None:
        if not self.enabled or principal.by_previous_key:
            return
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key_hash] = (self._clock() + self.seconds, principal)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _cache_of(session: Session) -> KeyCache | None:
    cache = session.info.get(SESSION_INFO_KEY)
    return cache if isinstance(cache, KeyCache) else None


def _note_credential_changes(session: Session, _context: Any) -> None:
    """After a flush (history still visible): did it change how any key authenticates?"""
    cache = _cache_of(session)
    if cache is None or not cache.enabled:
        return
    for obj in session.dirty:
        if isinstance(obj, Participant):
            attrs = inspect(obj).attrs
            if any(attrs[name].history.has_changes() for name in CREDENTIAL_FIELDS):
                session.info[_CHANGED] = True
                # Now as well as after the commit: nothing cached from here on outlives it.
                cache.clear()
                return


def _forget_after_commit(session: Session) -> None:
    if session.info.pop(_CHANGED, False) and (cache := _cache_of(session)) is not None:
        cache.clear()


event.listen(Session, "after_flush", _note_credential_changes)
event.listen(Session, "after_commit", _forget_after_commit)
