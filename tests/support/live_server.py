"""The service running for real in uvicorn on a free loopback port, for tests over TCP."""

from app.server import serve_in_thread as serve

__all__ = ["serve"]
