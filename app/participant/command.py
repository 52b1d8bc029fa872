"""``fedload agent``: one participant, run as its own process.

The process holds the participant's API key and private cost model, hosts the fragments the
registry assigns to it (through a ``Host`` that ``app/cli.py`` builds: Spark for real fragments),
serves its data-plane endpoint and reports it in every heartbeat, and trades load over REST.

It outlives its partners and the service: a tick that cannot reach the service is retried with
exponential back-off and jitter while the fragments keep running, and once the service answers
the next heartbeat re-registers the agent. SIGTERM (or Ctrl-C) ends the current tick, so no move
is left half-done, then stops every fragment after its last committed batch.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import typer

from app.cli_errors import ensure_free_port
from app.parent_watch import wanted, watch_parent
from app.participant.client import ApiError, FedloadClient
from app.participant.heartbeat import ServiceHeartbeats
from app.participant.ports import Host, MovementRecord, Mover, NoHost, Received
from app.work.distributions import (
    FRAGMENTS_ENV,
    OWN_DISTRIBUTION,
    allowed_distributions,
    parse_list,
)

if TYPE_CHECKING:  # imported when an agent runs: they load SciPy, seconds on every fedload start
    from app.participant.node import Agent, MoveEvent

log = logging.getLogger("fedload.agent")


class RegistryLoads(NoHost):
    """Declared loads as the registry records them: a participant without a data plane.

    Kept under this name for the scenario tests that run nodes in one process."""

    def __init__(self, client: FedloadClient | None = None) -> None:
        del client


class RegistryOnlyMover:
    """Takes over tasks that carry no state: committing the movement is the whole move."""

    def __init__(self, client: FedloadClient) -> None:
        self._client = client

    def receive(self, movement: MovementRecord) -> Received:
        self._client.commit(movement.id, movement.epoch)
        return Received()

    def receive_replica(self, movement: MovementRecord) -> Received:
        # No standby runs here: the registry's record of the replica is all that moves.
        self._client.commit(movement.id, movement.epoch)
        return Received()


@dataclass(frozen=True)
class AgentOptions:
    participant: str
    api: str
    key: str
    data_dir: Path
    listen: str = "127.0.0.1:0"
    advertise: str | None = None
    # Fragment checkpoints: a path or URI the Spark executors share (default: data_dir's
    # "checkpoints", enough for local mode and for a cluster on this one machine).
    checkpoint_dir: str | None = None
    spark_master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    spark_eager: bool = False
    cost_model: dict[str, Any] | None = None  # None: the one the registry holds for us
    interval: float = 1.0
    offer_interval: float = 7.0
    hysteresis: float = 0.01
    ticks: int = 0
    accept_fragments: frozenset[str] | None = None  # None: any catalogue fragment
    # The Python distributions whose fragments this agent runs (``--fragments``): fedload's
    # own and these. Advertised in its heartbeats; offers of others' fragments are declined.
    fragments: frozenset[str] = frozenset()
    events: Path | None = None
    # TLS on the Flight endpoint (PEM files): this agent's certificate and key, and the
    # authority that signed the partners' certificates (None: plain grpc://).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    # The federation's boundary interval (every agent of it the same): a source closes a bucket
    # this often, and logs and windows count in it.
    bucket_seconds: float = 1.0
    # How this agent's active copies reconcile: "alongside" (the serving query goes on beside
    # the redo), "alone" (Borealis: it stands down and consumers read another copy) or "auto"
    # (alone while the registry, granting the permit, names another copy serving; else
    # alongside).
    reconcile: str = "alongside"

    def __post_init__(self) -> None:
        if self.reconcile not in RECONCILE_MODES:
            raise ValueError(
                f"reconcile must be one of {', '.join(RECONCILE_MODES)}, got {self.reconcile!r}"
            )


RECONCILE_MODES = ("alongside", "alone", "auto")


@dataclass(frozen=True)
class AgentContext:
    """What a host factory gets to build this participant's data plane."""

    options: AgentOptions
    client: FedloadClient


HostFactory = Callable[[AgentContext], tuple[Host, Mover]]


class HostFailure(RuntimeError):
    """The data plane cannot go on (Spark did not start, its cluster gave no executor): the
    agent stops with this message rather than retry forever."""


# Back-off while the service is unreachable: 0.5 s doubling to 15 s, each wait drawn from
# [half, full] so that a federation's agents do not all return in the same instant.
BACKOFF_FIRST_S = 0.5
# How long the agent waits for its heartbeat sender's first answer before it ticks regardless.
HEARTBEAT_START_S = 30.0
BACKOFF_MAX_S = 15.0


def backoff_delay(failures: int, rng: random.Random) -> float:
    ceiling = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, failures - 1))
    return rng.uniform(ceiling / 2, ceiling)


def _unreachable(error: Exception) -> bool:
    if isinstance(error, httpx.TransportError):
        return True
    return isinstance(error, ApiError) and error.status >= 500


def _wait_for_service(client: FedloadClient, stop: threading.Event) -> dict[str, Any] | None:
    rng, failures = random.Random(), 0
    while not stop.is_set():
        try:
            return client.me()
        except Exception as error:
            if not _unreachable(error):
                raise
            failures += 1
            delay = backoff_delay(failures, rng)
            log.warning("service unreachable (%s); retrying in %.1f s", error, delay)
            stop.wait(delay)
    return None


def run_agent(options: AgentOptions, make_host: HostFactory) -> int:
    """Run until stopped (or ``options.ticks`` intervals); returns the exit status."""
    from app.participant.bpm_decisions import BpmDecisions
    from app.participant.node import Agent

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if wanted():
        watch_parent(os.getppid(), stop.set, stop)
    client = FedloadClient(options.api, options.key)
    try:
        me = _wait_for_service(client, stop)
        if me is None:
            return 0
        if me["name"] != options.participant:
            log.error("the key belongs to %r, not %r", me["name"], options.participant)
            return 2
        spec = options.cost_model or me.get("cost_model") or {"kind": "mm1"}
        decisions = BpmDecisions.for_model(spec, float(me["capacity"]), options.hysteresis)
        options.data_dir.mkdir(parents=True, exist_ok=True)
        allowed = allowed_distributions(options.fragments)
        # The host reads it there, whichever factory built it (``spark_jobs.runtime.own_work``).
        os.environ[FRAGMENTS_ENV] = ",".join(sorted(allowed))
        host, mover = make_host(AgentContext(options, client))
        events = options.events or options.data_dir / "events.jsonl"
        # Heartbeats from a process of the agent's own: a long tick never silences them.
        beats = ServiceHeartbeats(options.api, options.key, host.endpoint, client.rejoin)
        if not beats.wait_up(HEARTBEAT_START_S):
            log.warning("no heartbeat answered within %g s; ticking anyway", HEARTBEAT_START_S)
        try:
            node = Agent(
                options.participant,
                client,
                decisions,
                host,
                mover,
                offer_interval=options.offer_interval,
                on_move=lambda move: _record(events, move),
                accept_fragments=options.accept_fragments,
                # A data plane that keeps replicas real offers it (the Spark host does).
                availability=getattr(host, "availability", None),
                fragments=allowed,
            )
            _loop(node, client, options, stop, beats)
        except HostFailure as error:
            log.error("%s: %s", options.participant, error)
            return 3
        finally:
            beats.close()
            host.close()
        return 0
    finally:
        client.close()


def _loop(
    node: Agent,
    client: FedloadClient,
    options: AgentOptions,
    stop: threading.Event,
    beats: ServiceHeartbeats | None = None,
) -> None:
    rng, failures, tick = random.Random(), 0, 0
    started = time.monotonic()
    while not stop.is_set() and (options.ticks == 0 or tick < options.ticks):
        began = time.monotonic()
        try:
            if beats is not None:
                # Declared failed: drop what ran here and rejoin (app.participants.failures).
                beats.settle(lambda: node.host.reconcile([]))
            liveness = {p["name"]: p["liveness"] for p in client.participants()}
            node.tick(began - started, liveness=liveness)
        except HostFailure:
            raise
        except Exception as error:
            if not _unreachable(error):
                log.exception("tick failed; the agent goes on")
            else:
                failures += 1
                delay = backoff_delay(failures, rng)
                log.warning("service unreachable (%s); retrying in %.1f s", error, delay)
                stop.wait(delay)
                continue
        else:
            if failures:
                log.info("service reachable again after %d failed attempts", failures)
            failures = 0
        tick += 1
        stop.wait(max(0.0, options.interval - (time.monotonic() - began)))


def _record(events: Path, move: MoveEvent) -> None:
    line = {**asdict(move), "timings": dict(move.timings), "wall": time.time()}
    with events.open("a") as out:
        out.write(json.dumps(line) + "\n")
    log.info(
        "took %s from %s at %s (%d bytes of state)",
        move.task,
        move.src,
        move.price,
        move.state_bytes,
    )


def _distributions(given: list[str]) -> frozenset[str]:
    """``--fragments`` as given (each may be a comma list), else FEDLOAD_FRAGMENTS."""
    names = [name for value in given for name in parse_list(value)]
    if not given:
        names = parse_list(os.environ.get(FRAGMENTS_ENV))
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise typer.BadParameter(f"{name!r} is no distribution name", param_hint="--fragments")
    return allowed_distributions(names)


def _key_values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--spark-conf")
        out[key] = value
    return out


def agent_command(host_factory: Callable[[], HostFactory]) -> Callable[..., None]:
    """The ``fedload agent`` command, with the data plane ``app/cli.py`` provides (imported only
    when an agent runs, so other commands never load Spark)."""

    def agent(
        participant: str = typer.Option(..., "--participant", help="The participant to run."),
        api: str = typer.Option("http://127.0.0.1:8000", "--api", help="The service's base URL."),
        key: str = typer.Option(
            ..., "--key", envvar="FEDLOAD_API_KEY", help="The participant's API key."
        ),
        listen: str = typer.Option(
            "127.0.0.1:0", "--listen", help="HOST:PORT of this agent's Flight endpoint."
        ),
        advertise: str | None = typer.Option(
            None,
            "--advertise",
            help="HOST[:PORT] partners reach the endpoint at (default: listen); required when "
            "listening on all interfaces. Its host is also the Spark driver's address.",
        ),
        data_dir: Path = typer.Option(
            ..., "--data-dir", help="Checkpoints and the move log; keep it across restarts."
        ),
        checkpoint_dir: str | None = typer.Option(
            None,
            "--checkpoint-dir",
            help="Path or URI (file://, hdfs://, s3://) for fragment checkpoints, shared by the "
            "Spark executors (default: DATA_DIR/checkpoints).",
        ),
        spark_master: str | None = typer.Option(
            None,
            "--spark-master",
            envvar="SPARK_MASTER",
            help="Spark master, e.g. spark://HOST:7077 for a standalone cluster (default "
            "local[2]); fedload's code is shipped to the executors.",
        ),
        spark_conf: list[str] = typer.Option(
            [], "--spark-conf", help="Extra Spark setting KEY=VALUE; repeatable."
        ),
        cost_model: str | None = typer.Option(
            None, "--cost-model", help="Private cost model as JSON or @FILE (default: registry's)."
        ),
        spark_eager: bool = typer.Option(
            False, "--spark-eager", help="Start Spark at once, not when a fragment first runs."
        ),
        accept: list[str] = typer.Option(
            [], "--accept", help="Catalogue fragments this participant runs (default: all)."
        ),
        fragments: list[str] = typer.Option(
            [],
            "--fragments",
            help="A Python distribution whose fragments this agent may run (repeatable, or "
            f"comma-separated; default: {FRAGMENTS_ENV}, a comma list). Each must be installed "
            "here at the version a task registered. The agent advertises them in its "
            "heartbeats, and partners offer it only tasks it can run. "
            f"'{OWN_DISTRIBUTION}' is always allowed: its code already runs as this agent.",
        ),
        interval: float = typer.Option(1.0, help="Seconds between statistics (Borealis: 1 s)."),
        offer_interval: float = typer.Option(7.0, help="Seconds between offers (Borealis: 7 s)."),
        hysteresis: float = typer.Option(0.01, help="Price band against flip-flop moves."),
        ticks: int = typer.Option(0, help="Stop after this many intervals (0: until stopped)."),
        bucket_seconds: float = typer.Option(
            1.0,
            "--bucket-seconds",
            envvar="FEDLOAD_BUCKET_SECONDS",
            help="Boundary interval of the federation's streams, dividing a second (Borealis: "
            "0.1); every agent of a federation must use the same.",
        ),
        reconcile: str = typer.Option(
            "alongside",
            "--reconcile",
            envvar="FEDLOAD_RECONCILE",
            help="How an active copy held here reconciles after a failure: 'alongside' (its "
            "serving query goes on, tentative within X, beside the redo), 'alone' (Borealis: "
            "it stops serving for the redo, advertising STABILIZATION, and consumers read "
            "another copy) or 'auto' (alone when the registry, granting the permit, names "
            "another copy serving; else alongside).",
        ),
        tls_cert: Path | None = typer.Option(
            None,
            "--tls-cert",
            envvar="FEDLOAD_TLS_CERT",
            help="PEM certificate of this agent's Flight endpoint: serve grpc+tls:// (with "
            "--tls-key).",
        ),
        tls_key: Path | None = typer.Option(
            None, "--tls-key", envvar="FEDLOAD_TLS_KEY", help="PEM private key of --tls-cert."
        ),
        tls_ca: Path | None = typer.Option(
            None,
            "--tls-ca",
            envvar="FEDLOAD_TLS_CA",
            help="PEM of the authority that signed the partners' endpoint certificates "
            "(default: the system's).",
        ),
    ) -> None:
        """Run one participant: host its fragments, heartbeat, answer offers, shed load."""
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        # A line per request (httpx) or per callback from the JVM (py4j: each batch of each
        # query) drowns the log, and a failed scenario prints only its last lines.
        for chatty in ("httpx", "py4j"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
        try:
            listen_host, listen_port = parse_address(listen)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--listen") from error
        if listen_host in WILDCARDS and not advertise:
            raise typer.BadParameter(
                f"{listen} listens on every interface: give the address partners reach it at",
                param_hint="--advertise",
            )
        if advertise is not None and advertised_host(listen, advertise) in (*WILDCARDS, ""):
            raise typer.BadParameter(
                f"{advertise!r} is no address a partner can reach", param_hint="--advertise"
            )
        if spark_master is not None and not spark_master.startswith(SPARK_MASTER_FORMS):
            raise typer.BadParameter(
                f"{spark_master!r} is no Spark master URL (expected one of "
                f"{', '.join(f + '...' for f in SPARK_MASTER_FORMS)})",
                param_hint="--spark-master",
            )
        if (tls_cert is None) != (tls_key is None):
            raise typer.BadParameter(
                "give both --tls-cert and --tls-key, or neither", param_hint="--tls-cert"
            )
        for flag, given in (("--tls-cert", tls_cert), ("--tls-key", tls_key), ("--tls-ca", tls_ca)):
            if given is not None and not given.is_file():
                raise typer.BadParameter(f"{given} is no file", param_hint=flag)
        try:
            buckets_per_second(bucket_seconds)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--bucket-seconds") from error
        if reconcile not in RECONCILE_MODES:
            raise typer.BadParameter(
                f"{reconcile!r} is not one of {', '.join(RECONCILE_MODES)}",
                param_hint="--reconcile",
            )
        # Now, in one line, rather than after contacting the service and starting the host.
        ensure_free_port(listen_host, listen_port, "--listen")
        model = None
        if cost_model is not None:
            text = Path(cost_model[1:]).read_text() if cost_model.startswith("@") else cost_model
            try:
                model = json.loads(text)
            except json.JSONDecodeError as error:
                raise typer.BadParameter(f"not JSON: {error}", param_hint="--cost-model") from error
        options = AgentOptions(
            participant=participant,
            api=api,
            key=key,
            data_dir=data_dir,
            listen=listen,
            advertise=advertise,
            checkpoint_dir=checkpoint_dir,
            spark_master=spark_master,
            spark_conf=_key_values(spark_conf),
            spark_eager=spark_eager,
            cost_model=model,
            interval=interval,
            offer_interval=offer_interval,
            hysteresis=hysteresis,
            ticks=ticks,
            accept_fragments=frozenset(accept) if accept else None,
            fragments=_distributions(fragments),
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_ca=tls_ca,
            bucket_seconds=bucket_seconds,
            reconcile=reconcile,
        )
        raise typer.Exit(run_agent(options, host_factory()))

    return agent


WILDCARDS = ("0.0.0.0", "::", "[::]")
SPARK_MASTER_FORMS = ("local", "spark://", "yarn", "k8s://", "mesos://")


def advertised_host(listen: str, advertise: str | None) -> str:
    """The host part partners (and Spark executors) reach this agent at."""
    if advertise:
        text = advertise.removeprefix("grpc+tls://").removeprefix("grpc://")
        host, sep, port = text.rpartition(":")
        return host if sep and port.isdigit() else text
    return parse_address(listen)[0]


def buckets_per_second(bucket_seconds: float) -> int:
    """How many buckets make a second; ValueError unless the bucket divides a second (a
    source generates a second at a time, and windows are whole seconds)."""
    if not 0.01 <= bucket_seconds <= 1.0:
        raise ValueError(f"bucket_seconds must be between 0.01 and 1, got {bucket_seconds}")
    count = round(1.0 / bucket_seconds)
    if abs(count * bucket_seconds - 1.0) > 1e-9:
        raise ValueError(
            f"bucket_seconds must divide one second (0.1, 0.2, 0.25, 0.5, 1), got {bucket_seconds}"
        )
    return count


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host, int(port)
