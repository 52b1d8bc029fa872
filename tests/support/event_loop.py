"""``asyncio.run`` for tests, on a thread of its own: earlier tests in the same process
(Playwright's sync API) may leave an event loop running in the main thread, where
``asyncio.run()`` refuses to start."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
