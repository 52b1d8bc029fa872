"""A fault-injecting TCP proxy: forwards a loopback port to another; cuts and heals on command.

Put between two agents' Arrow Flight endpoints it turns a healthy link into a failed one without
touching either process, which is how the scenarios make network partitions:

- ``cut("refuse")``: every open connection is reset and new ones are reset on accept; the client
  sees "connection refused/reset" at once (a crashed host, a firewall rejecting).
- ``cut("drop")``: a partition: nothing gets through on open or new connections, and the
  client sees silence until its own timeout. Bytes are held, not discarded: the proxy stops
  reading, so TCP's own flow control holds them in the senders' buffers, as TCP retransmission
  would across a real partition. Discarding them instead would corrupt the HTTP/2 streams that
  survive the heal, which no real network does to a TCP connection.
- ``heal()``: traffic flows again: held bytes are delivered, connections accepted during the
  cut are connected to the target now.

Threads, not asyncio: the proxy runs inside a scenario driver that is itself synchronous, and a
few links with a handful of gRPC connections each need only a few threads.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Literal

CutMode = Literal["refuse", "drop"]
_BUFFER = 65536


def _reset(sock: socket.socket) -> None:
    """End a connection so the peer notices at once.

    Linger 0 makes the final close send RST rather than FIN; ``shutdown`` first, because a pump
    thread blocked in ``recv`` on the socket keeps it open past a bare ``close``.
    """
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class ProxyStats:
    accepted: int = 0
    refused: int = 0
    forwarded_bytes: int = 0
    # Bytes that waited for a heal (read just before a cut, delivered after it).
    held_bytes: int = 0


class FaultProxy:
    def __init__(
        self, target_port: int, *, target_host: str = "127.0.0.1", listen_port: int = 0
    ) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.mode: CutMode | None = None
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self._closed = threading.Event()
        # Set while traffic may flow; cleared by a "drop" cut.
        self._flowing = threading.Event()
        self._flowing.set()
        self._thread = threading.Thread(target=self._accept_loop, name=f"proxy:{self.port}")
        self._thread.daemon = True
        self._thread.start()

    @property
    def location(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self.mode is not None

    def cut(self, mode: CutMode = "refuse") -> None:
        if mode not in ("refuse", "drop"):
            raise ValueError(f"FaultProxy.cut: mode must be 'refuse' or 'drop', got {mode!r}")
        with self._lock:
            self.mode = mode
            if mode == "drop":
                self._flowing.clear()
            if mode == "refuse":
                for client, upstream in self._pairs:
                    _reset(client)
                    if upstream is not None:
                        _reset(upstream)
                self._pairs.clear()

    def heal(self) -> None:
        with self._lock:
            self.mode = None
            held = [c for c, u in self._pairs if u is None]
            self._pairs = [(c, u) for c, u in self._pairs if u is not None]
            self._flowing.set()
        for client in held:
            self._connect(client)

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for client, upstream in self._pairs:
                _reset(client)
                if upstream is not None:
                    _reset(upstream)
            self._pairs.clear()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                mode = self.mode
                self.stats.accepted += 1
            if mode == "refuse":
                self.stats.refused += 1
                _reset(client)
                continue
            if mode == "drop":
                # Like a SYN lost in a partition: nothing happens until the heal.
                with self._lock:
                    self._pairs.append((client, None))
                continue
            self._connect(client)

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=1.0)
            upstream.settimeout(None)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            # The target itself is down: behave like it (refuse).
            _reset(client)
            return
        with self._lock:
            self._pairs.append((client, upstream))
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                # Not reading during a cut is what holds the bytes (TCP flow control).
                self._flowing.wait()
                data = source.recv(_BUFFER)
                if not data:
                    break
                if not self._flowing.is_set():
                    self.stats.held_bytes += len(data)
                    self._flowing.wait()
                if self._closed.is_set():
                    break
                sink.sendall(data)
                self.stats.forwarded_bytes += len(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
