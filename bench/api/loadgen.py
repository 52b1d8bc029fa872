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


class Connection:
    """One keep-alive connection of one participant. The generator's CPU per request is part
    of what the benchmark reports: the request head is built once but for its first line, the
    response head is read in one call, and a body is parsed only when asked for."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host = host
        self.port = port
        self._headers = f"Host: {host}:{port}\r\nAuthorization: Bearer {key}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        # Connections opened (a new one after the server closed an idle one).
        self.connections = 0

    async def request(self, method: str, path: str, body: Any = None) -> Reply:
        if self.reader is not None and self.reader.at_eof():
            # The server closed the connection while it was idle (uvicorn's keep-alive timeout
            # is 5 s; an open loop's pair may wait longer than that for its next cycle): a new
            # connection, as an HTTP client does; the request was never sent.
            await self.close()
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.connections += 1
        assert self.reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        framing = (
            b"Content-Length: %d\r\nContent-Type: application/json\r\n\r\n" % len(payload)
            if payload
            else b"Content-Length: 0\r\n\r\n"
        )
        self.writer.write(
            b"%s %s HTTP/1.1\r\n" % (method.encode(), path.encode())
            + self._headers
            + framing
            + payload
        )
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            raise ConnectionError("the server closed the connection") from exc
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
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
            self.reader = None


@dataclass
class Tally:
    """Latencies (seconds) of every request, and what went wrong, per operation."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    # Every request sent, warm-up included (CPU per request counts them all).
    sent: int = 0
    # Open loop: arrivals that found every pair of participants busy (not sent at all).
    no_free_pair: int = 0
    # Connections the generator opened: two per pair, and one more each time the server had
    # closed an idle one.
    connections: int = 0

    def record(self, op: str, started: float, ok: bool) -> None:
        self.latencies.setdefault(op, []).append(time.perf_counter() - started)
        if not ok:
            self.errors[op] = self.errors.get(op, 0) + 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
