"""Participant names by id, remembered per application.

Nearly every view names participants (a contract's parties, an offer's ends), which cost one
query per request (``bench/api/cpu_profile.py``). A participant's name never changes and its id is
never given to another, so a name once committed can be remembered for the life of the
application. Only names read by a transaction that then committed are remembered: a
participant created in a transaction that rolls back never enters the cache (SQLite may hand
its id to the next participant).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from sqlalchemy import event
from sqlalchemy.orm import Session

# sessionmaker info: the cache of the sessions' application (``create_app`` puts it there).
SESSION_INFO_KEY = "fedload.participants.name_cache"
_READ = "fedload.participants.names_read"
MAX_ENTRIES = 100_000


class NameCache:
    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._lock = threading.Lock()

    def known(self, ids: Iterable[int]) -> dict[int, str]:
        names = self._names
        return {i: names[i] for i in ids if i in names}

    def add(self, names: dict[int, str]) -> None:
        with self._lock:
            if len(self._names) + len(names) > MAX_ENTRIES:
                self._names.clear()
            self._names.update(names)


def cached_names(session: Session, ids: Iterable[int]) -> dict[int, str]:
    cache = session.info.get(SESSION_INFO_KEY)
    return cache.known(ids) if isinstance(cache, NameCache) else {}


def read_names(session: Session, names: dict[int, str]) -> None:
    """``names`` were read in this session: remembered once its transaction commits."""
    if isinstance(session.info.get(SESSION_INFO_KEY), NameCache):
        session.info.setdefault(_READ, {}).update(names)


def _remember(session: Session) -> None:
    read = session.info.pop(_READ, None)
    cache = session.info.get(SESSION_INFO_KEY)
    if read and isinstance(cache, NameCache) and not session.in_nested_transaction():
        cache.add(read)


def _forget(session: Session, _previous: object) -> None:
    session.info.pop(_READ, None)


event.listen(Session, "after_commit", _remember)
event.listen(Session, "after_soft_rollback", _forget)
