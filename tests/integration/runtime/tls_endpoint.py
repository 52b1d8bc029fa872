"""A Flight endpoint with TLS and tokens in a process of its own (test_dataplane_tls.py):
``python -m tests.integration.runtime.tls_endpoint CERT KEY SERVICE_PUBLIC_KEY PARTICIPANT``
prints its location, serves stream ``q1.out`` (three rows) until its stdin closes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa

from app.dataplane.tokens import load_public_key
from spark_jobs.runtime.dataplane import FlightAuth, TlsFiles
from spark_jobs.runtime.transport import StreamServer

ROWS = pa.table(
    {
        "stime": pa.array([1_000_000, 2_000_000, 3_000_000], pa.timestamp("us", tz="UTC")),
        "v": [1, 2, 3],
    }
)


def main() -> None:
    cert, key, public, participant = sys.argv[1:5]
    server = StreamServer(
        auth=FlightAuth(participant, (load_public_key(Path(public).read_bytes()),)),
        tls=TlsFiles(Path(cert), Path(key)),
    )
    server.log.declare("q1.out", 1.0)
    server.log.append("q1.out", ROWS, boundary=4)
    print(server.location, flush=True)
    sys.stdin.read()
    os._exit(0)  # the process ends here: a graceful gRPC shutdown would only add seconds


if __name__ == "__main__":
    main()
