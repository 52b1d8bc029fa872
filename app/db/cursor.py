"""psycopg cursors whose ``description`` is built only when someone reads it.

psycopg builds ``cursor.description`` anew on every access: a ``Column`` per column of the
result, each looking its type up. SQLAlchemy asks for it after every statement, but for a
statement it has compiled and run before it only checks that there is one and its length (the
result's columns are known from the compiled statement): for a contract, eighteen ``Column``
objects built and dropped per query, ~5% of a request's CPU in the API (``bench/api``).

``LazyDescriptionCursor.description`` is a sequence that knows its length and builds the
columns, exactly as psycopg does, the first time one is read. It keeps the result it describes,
so it describes that result even when read after the cursor ran another statement.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import psycopg
from psycopg import Column
from psycopg.pq import ExecStatus

_TUPLES = (ExecStatus.TUPLES_OK, ExecStatus.SINGLE_TUPLE, ExecStatus.TUPLES_CHUNK)


class _ResultOf:
    """What ``psycopg.Column`` reads of its cursor, for one result."""

    __slots__ = ("_encoding", "adapters", "pgresult")

    def __init__(self, cursor: psycopg.Cursor[Any], result: Any) -> None:
        self.pgresult = result
        self._encoding = cursor._encoding
        self.adapters = cursor.adapters


class LazyDescription(Sequence[Column]):
    __slots__ = ("_columns", "_count", "_result")

    def __init__(self, result: _ResultOf, count: int) -> None:
        self._result = result
        self._count = count
        self._columns: list[Column] | None = None

    def _built(self) -> list[Column]:
        if self._columns is None:
            self._columns = [Column(self._result, i) for i in range(self._count)]  # type: ignore[arg-type]
        return self._columns

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Column: ...

    @overload
    def __getitem__(self, index: slice) -> list[Column]: ...

    def __getitem__(self, index: int | slice) -> Column | list[Column]:
        return self._built()[index]

    def __iter__(self) -> Iterator[Column]:
        return iter(self._built())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(self._built())


class LazyDescriptionCursor(psycopg.Cursor[Any]):
    __slots__ = ()

    @property
    def description(self) -> LazyDescription | None:  # type: ignore[override]
        result = self.pgresult
        # As psycopg decides: columns, or a result that says it holds rows ("SELECT ;").
        if result and (result.nfields or result.status in _TUPLES):
            return LazyDescription(_ResultOf(self, result), result.nfields)
        return None
