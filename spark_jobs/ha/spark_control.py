"""The control plane of the Spark HA scenarios outside the product: JSON actions over Flight.

Every process of the scenario (producer, fragment hosts, the driver's registry) serves its
commands as Flight actions, as the runtime's ``StreamServer`` does for streams; nothing is shared
but sockets. ``spec_of`` rebuilds the fragment from a JSON plan, so B and its replica run the
identical fragment without pickling a function between processes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.flight as flight

from spark_jobs.fragments import CONNECTION_SCHEMA, connection_counts
from spark_jobs.runtime.host import FragmentSpec, StreamRef

Handler = Callable[..., Any]


class ActionServer(flight.FlightServerBase):
    """Answers ``do_action(kind, json body)`` with ``handlers[kind](**body)`` as JSON."""

    def __init__(self, handlers: dict[str, Handler], host: str = "127.0.0.1") -> None:
        super().__init__(f"grpc://{host}:0")
        self._handlers = handlers
        self.location = f"grpc://{host}:{self.port}"

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        handler = self._handlers.get(action.type)
        if handler is None:
            raise flight.FlightServerError(f"unknown action {action.type!r}")
        body = json.loads(action.body.to_pybytes()) if action.body.size else {}
        try:
            result = handler(**body)
        except flight.FlightError:
            raise
        except Exception as error:
            # The type name travels so the caller can tell a refusal from a crash.
            raise flight.FlightServerError(f"{type(error).__name__}: {error}") from error
        yield json.dumps(result, default=str).encode()


class ActionClient:
    def __init__(self, location: str) -> None:
        self.location = location
        self._client = flight.FlightClient(location)

    def call(self, kind: str, *, timeout: float | None = None, **body: Any) -> Any:
        options = flight.FlightCallOptions(timeout=timeout)
        action = flight.Action(kind, json.dumps(body).encode())
        results = list(self._client.do_action(action, options))
        return json.loads(results[0].body.to_pybytes()) if results else None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ActionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spec_of(plan: dict[str, Any]) -> FragmentSpec:
    """The stateful fragment of the scenario (connections per source IP and window) from its
    JSON plan: name, input/output ``[location, stream]``, window, threshold, and the name it
    acknowledges its input under (an active replica must not share the primary's)."""
    options = {"consumer": plan["consumer"]} if plan.get("consumer") else {}
    return FragmentSpec(
        name=plan["name"],
        build=functools.partial(
            connection_counts,
            window_seconds=int(plan["window_s"]),
            threshold=int(plan["threshold"]),
        ),
        input_schema=CONNECTION_SCHEMA,
        inputs=(StreamRef(*plan["input"]),),
        output=StreamRef(*plan["output"]),
        bucket_seconds=float(plan.get("bucket_s", 1.0)),
        trigger_seconds=float(plan.get("trigger_s", 0.2)),
        max_buckets_per_batch=int(plan.get("max_buckets", 3)),
        options=options,
    )
