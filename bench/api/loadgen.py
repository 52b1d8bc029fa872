"""A small closed-loop HTTP/1.1 load generator on asyncio streams (keep-alive, one connection
per virtual user). Raw streams rather than an HTTP client library: on a 2-core machine the
generator shares the CPU with the service, and a full client costs several times more per
request than the service's own work we want to measure."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Connection:
    host: str
    port: int
    key: str
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None) -> Reply:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.key}\r\nContent-Length: {len(payload)}\r\n"
            + ("Content-Type: application/json\r\n" if payload else "")
            + "\r\n"
        )
        self.writer.write(head.encode() + payload)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        data = await self.reader.readexactly(length) if length else b""
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Reply(status, headers, data)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@dataclass
class Tally:
    """Latencies (seconds) of every request, and what went wrong, per operation."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    # Every request sent, warm-up included (CPU per request counts them all).
    sent: int = 0

    def record(self, op: str, started: float, ok: bool) -> None:
        self.latencies.setdefault(op, []).append(time.perf_counter() - started)
        if not ok:
            self.errors[op] = self.errors.get(op, 0) + 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
