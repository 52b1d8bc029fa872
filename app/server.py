"""Run the service in a background thread (the demo, tests over real TCP)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from app.main import create_app
from app.settings import Settings


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(settings: Settings, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Yield the base URL of the service once it accepts connections; stop it on exit."""
    port = port or free_port(host)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=host,
            port=port,
            log_level="warning",
            access_log=settings.access_log,
        )
    )
    thread = threading.Thread(target=server.run, name="fedload-service", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the service did not start on {host}:{port} within 20 s")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
