"""The fault-injecting proxy on real sockets and a real Arrow Flight server."""

from __future__ import annotations

import socket
import time

import pyarrow.flight as flight
import pytest

from spark_jobs.ha.faultproxy import FaultProxy
from spark_jobs.runtime import StreamClient, StreamServer


@pytest.fixture
def server():
    made = StreamServer()
    try:
        yield made
    finally:
        made.shutdown()


def info(location: str, timeout: float = 0.5) -> bytes:
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(timeout=timeout)
        action = flight.Action("info", b'{"stream": "s"}')
        return next(iter(client.do_action(action, options=options))).body.to_pybytes()
    finally:
        client.close()


def test_forwards_cuts_refusing_and_heals(server) -> None:
    StreamClient(server.location).declare("s", 1.0)
    with FaultProxy(server.port) as proxy:
        assert b"boundary" in info(proxy.location)
        proxy.cut("refuse")
        began = time.monotonic()
        with pytest.raises(flight.FlightError):
            info(proxy.location, timeout=2.0)
        # Refused, not timed out: the client learns at once.
        assert time.monotonic() - began < 1.5
        assert proxy.stats.refused >= 1
        proxy.heal()
        assert b"boundary" in info(proxy.location)
        assert proxy.stats.forwarded_bytes > 0


def test_drop_mode_is_silence_until_the_client_times_out(server) -> None:
    StreamClient(server.location).declare("s", 1.0)
    with FaultProxy(server.port) as proxy:
        proxy.cut("drop")
        began = time.monotonic()
        with pytest.raises(flight.FlightError):
            info(proxy.location, timeout=0.4)
        assert time.monotonic() - began >= 0.35
        proxy.heal()
        assert b"boundary" in info(proxy.location)


def test_a_connection_held_through_a_drop_cut_is_intact_after_the_heal(server) -> None:
    """Like TCP across a partition: bytes wait, nothing is lost or corrupted."""
    StreamClient(server.location).declare("s", 1.0)
    with FaultProxy(server.port) as proxy:
        client = flight.FlightClient(proxy.location)
        try:
            ask = flight.Action("info", b'{"stream": "s"}')
            assert b"boundary" in next(iter(client.do_action(ask))).body.to_pybytes()
            proxy.cut("drop")
            with pytest.raises(flight.FlightError):
                list(client.do_action(ask, options=flight.FlightCallOptions(timeout=0.3)))
            proxy.heal()
            # The same channel, the same TCP connection: still a valid HTTP/2 stream.
            for _ in range(3):
                assert b"boundary" in next(iter(client.do_action(ask))).body.to_pybytes()
        finally:
            client.close()


def test_open_connection_is_cut_mid_stream(server) -> None:
    with FaultProxy(server.port) as proxy:
        raw = socket.create_connection(("127.0.0.1", proxy.port))
        time.sleep(0.1)
        proxy.cut("refuse")
        raw.settimeout(1.0)
        ended = False
        try:
            # The server's HTTP/2 preface may still be buffered; the reset comes after it.
            for _ in range(100):
                if raw.recv(65536) == b"":
                    ended = True
                    break
        except ConnectionResetError:
            ended = True
        finally:
            raw.close()
        assert ended


def test_bad_cut_mode_is_refused(server) -> None:
    with FaultProxy(server.port) as proxy, pytest.raises(ValueError, match="mode"):
        proxy.cut("explode")  # type: ignore[arg-type]
    assert not proxy.is_cut
