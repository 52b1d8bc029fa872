"""What the data plane's tokens cost per Flight call: the same calls against an endpoint without
and with token verification, in the same run (a ratio; the machine is shared).

    PYTHONPATH=. python -m bench.dataplane.token_overhead --calls 2000

``--calls`` small ``info`` actions and ``--reads`` reads of a 10,000-row stream go to a plain
and an authenticated endpoint, interleaved in batches (a fresh token per call would be the
registry's cost, not the endpoint's: the client reuses one, as an agent does).
"""

from __future__ import annotations

import argparse
import os
import time

import pyarrow as pa

from app.dataplane.tokens import READ, Grant, claims_for, new_signing_key, sign, verify
from spark_jobs.runtime.dataplane import FixedToken, FlightAuth
from spark_jobs.runtime.transport import StreamClient, StreamServer


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "stime": pa.array([i * 1000 for i in range(n)], pa.timestamp("us", tz="UTC")),
            "v": range(n),
        }
    )


def _calls(client: StreamClient, calls: int, reads: int) -> tuple[float, float]:
    began = time.perf_counter()
    for _ in range(calls):
        client.info("s.out")
    middle = time.perf_counter()
    for _ in range(reads):
        client.read_table("s.out")
    return middle - began, time.perf_counter() - middle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    key = new_signing_key()
    grant = Grant(frozenset({READ}), stream="s.out")
    token = sign(claims_for("B", "A", grant, now=time.time(), ttl=3600), key)
    plain, secured = StreamServer(), StreamServer(auth=FlightAuth("A", (key.public_key(),)))
    for server in (plain, secured):
        server.log.declare("s.out", 1.0)
        server.log.append("s.out", _rows(10_000), boundary=20)
    totals = {"plain": [0.0, 0.0], "secured": [0.0, 0.0]}
    calls, reads = args.calls // args.batches, args.reads // args.batches
    try:
        with (
            StreamClient(plain.location) as to_plain,
            StreamClient(secured.location, tokens=FixedToken(token)) as to_secured,
        ):
            # Interleaved in small batches, so a load swing on the shared machine hits both.
            for _ in range(args.batches):
                for name, client in (("plain", to_plain), ("secured", to_secured)):
                    small, large = _calls(client, calls, reads)
                    totals[name][0] += small
                    totals[name][1] += large
        began = time.perf_counter()
        for _ in range(1000):
            verify(token, [key.public_key()], audience="A", now=time.time())
        verifying = (time.perf_counter() - began) / 1000
    finally:
        plain.shutdown()
        secured.shutdown()
    n_small, n_large = calls * args.batches, reads * args.batches
    p_small, s_small = totals["plain"][0] / n_small, totals["secured"][0] / n_small
    p_large, s_large = totals["plain"][1] / n_large, totals["secured"][1] / n_large
    print(
        f"info: {p_small * 1e6:.0f} -> {s_small * 1e6:.0f} us per call (x{s_small / p_small:.2f}); "
        f"read of 10,000 rows: {p_large * 1e3:.2f} -> {s_large * 1e3:.2f} ms "
        f"(x{s_large / p_large:.2f}); one verify() = {verifying / p_small:.2f} plain info calls; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
