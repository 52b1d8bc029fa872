"""Prometheus metrics: requests, latency, moves, offers, payments, participants by liveness.

Counters live in this process (or, with ``PROMETHEUS_MULTIPROC_DIR`` set before the process
starts, in files there that ``/metrics`` adds up over every worker). Moves and offers are
counted from the audit entries of committed transactions, payments from the ledger entries
they inserted, so a rolled-back step is never counted. Participants by liveness are read from
the registry at each scrape, with a short session of their own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, event, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.audit import sealing
from app.db.base import utcnow
from app.models import LedgerEntry, Participant, ParticipantStatus
from app.settings import Settings

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter(
    "fedload_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "fedload_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
MOVEMENTS = Counter(
    "fedload_movements",
    "Task movements by reason and outcome (prepared, committed, aborted).",
    ["reason", "outcome"],
)
OFFERS = Counter(
    "fedload_offers",
    "Offers by outcome (created, accepted, partially_accepted, rejected, withdrawn, ...).",
    ["outcome"],
)
PAYMENTS = Counter(
    "fedload_payments",
    "Money paid under contracts (the ledger's amounts), by kind of ledger entry.",
    ["kind"],
)

LIVENESS_STATES = ("online", "suspect", "failed", "unknown")


# Each request's two series, by (route, method, status): ``labels`` checks and joins its
# arguments and takes the metric's lock at every call, to hand back the same child each time.
_REQUEST_SERIES: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def count_request(route: str, method: str, status: int, seconds: float) -> None:
    key = (route, method, status)
    series = _REQUEST_SERIES.get(key)
    if series is None:
        series = _REQUEST_SERIES[key] = (
            REQUESTS.labels(route=route, method=method, status=str(status)),
            LATENCY.labels(route=route, method=method),
        )
    series[0].inc()
    series[1].observe(seconds)


def _count_audited(entries: list[sealing.CommittedEntry]) -> None:
    for entry in entries:
        kind, _, outcome = entry.action.partition(".")
        if kind == "movement" and entry.movement_reason is not None:
            MOVEMENTS.labels(reason=entry.movement_reason, outcome=outcome).inc()
        elif kind == "offer":
            OFFERS.labels(outcome=outcome).inc()


_PAID = "fedload.metrics.paid"


def _note_payments(session: Session, _context: Any) -> None:
    paid: dict[str, float] = session.info.setdefault(_PAID, {})
    for row in session.new:
        if isinstance(row, LedgerEntry) and row.amount:
            paid[row.kind] = paid.get(row.kind, 0.0) + row.amount


def _count_payments(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint's release: the transaction goes on
        return
    for kind, amount in session.info.pop(_PAID, {}).items():
        PAYMENTS.labels(kind=kind).inc(amount)


def _forget_payments(session: Session, _previous: Any) -> None:
    session.info.pop(_PAID, None)


sealing.on_committed(_count_audited)
event.listen(Session, "after_flush", _note_payments)
event.listen(Session, "after_commit", _count_payments)
event.listen(Session, "after_soft_rollback", _forget_payments)


class ParticipantsByLiveness(Collector):
    """``fedload_participants{liveness, status}``, from the heartbeats at scrape time (the rule
    of ``app/participants/liveness.py``: online within one interval, suspect within
    ``misses`` intervals, failed after)."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self._sessions = sessions
        self._interval = settings.heartbeat_interval_seconds
        self._misses = settings.heartbeat_misses

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "fedload_registry_up", "1 when /metrics could read the registry, else 0."
        )
        try:
            counts = self._counts()
        except SQLAlchemyError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        gauge = GaugeMetricFamily(
            "fedload_participants",
            "Registered participants by liveness (from heartbeats) and status.",
            labels=["liveness", "status"],
        )
        for (liveness, status), n in sorted(counts.items()):
            gauge.add_metric([liveness, status], n)
        yield gauge

    def _counts(self) -> dict[tuple[str, str], int]:
        now = utcnow()
        heard = Participant.last_heartbeat_at
        liveness = case(
            (heard.is_(None), "unknown"),
            (heard >= now - timedelta(seconds=self._interval), "online"),
            (heard >= now - timedelta(seconds=self._interval * self._misses), "suspect"),
            else_="failed",
        )
        # Grouped outside a subquery: PostgreSQL would not see two renderings of the CASE with
        # its own bound times as one expression.
        states = select(liveness.label("liveness"), Participant.status.label("status")).subquery()
        counts = {(state, "active"): 0 for state in LIVENESS_STATES}
        with self._sessions() as session:
            rows = session.execute(
                select(states.c.liveness, states.c.status, func.count()).group_by(
                    states.c.liveness, states.c.status
                )
            )
            for state, status, n in rows:
                counts[(str(state), ParticipantStatus(status).value)] = n
        return counts


class _Registered(Collector):
    """Everything in this process's default registry (requests, moves, process figures)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def exposition(sessions: sessionmaker[Session], settings: Settings) -> tuple[bytes, str]:
    """The text a scrape gets, and its content type."""
    registry = CollectorRegistry()
    if os.environ.get(MULTIPROCESS_ENV):
        multiprocess.MultiProcessCollector(registry)  # every worker's counters, added up
    else:
        registry.register(_Registered())
    registry.register(ParticipantsByLiveness(sessions, settings))
    return generate_latest(registry), CONTENT_TYPE_LATEST
