"""One example for every request and response schema of the REST API, keyed by schema name.

They are applied to ``components.schemas`` when the OpenAPI document is generated
(``install_examples``), so the schema classes stay as their domains' authors keep them. The
examples tell one story, the Borealis demo's (``contracts/borealis-demo.yaml``): A sheds its
query fragments to B under a contract priced in [0.24, 0.26] per unit load per second; C and D
sign a contract with availability terms and D hosts a replica.

``tests/integration/api/test_openapi_examples.py`` checks that every component schema has one
and that each validates against its schema: a new schema without an entry here fails it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

Example = Any  # a JSON value

_AT = "2026-11-24T09:30:00Z"
_LATER = "2026-11-24T09:30:41Z"
_STARTS = "2026-11-24T09:00:00Z"
_ENDS = "2027-11-24T09:00:00Z"
_MM1 = {"kind": "mm1"}
_AVAILABILITY = {"recovery": "precise", "max_delay_seconds": 3.0, "replica_hosting": True}

_PARTICIPANT_READ = {
    "id": 2,
    "name": "B",
    "profile": {"site": "B"},
    "status": "active",
    "liveness": "online",
    "capacity": 100.0,
    "cost_model": _MM1,
    "endpoint": "grpc://10.0.0.2:7001",
    "last_heartbeat_at": _AT,
    "failed_at": None,
    "fragments": ["netmon-fragments"],
    "created_at": _STARTS,
}

_CONTRACT_TERMS = {
    "price_min": 0.24,
    "price_max": 0.26,
    "starts_at": _STARTS,
    "ends_at": _ENDS,
    "min_move_seconds": 30.0,
    "availability": None,
}

_LEDGER_ENTRY = {
    "id": 17,
    "kind": "load",
    "payer": "A",
    "payee": "B",
    "task_id": 4,
    "load": 5.0,
    "price": 0.25,
    "seconds": 60.0,
    "amount": 75.0,
    "at": _AT,
}

_PERMIT = {
    "fragment": "C.q01",
    "holder": "C.q01@D",
    "participant": "D",
    "expires_at": "2026-11-24T09:30:10Z",
    "fence": 3,
    "held": True,
}


_AUDIT_ENTRY = {
    "id": 42,
    "at": _LATER,
    "actor": "participant:B",
    "action": "offer.accepted",
    "entity_type": "offer",
    "entity_id": 12,
    "detail": {"tasks": ["A.q01"], "agreed_price": 0.25},
    "participants": ["A", "B"],
    "chain": 3,
    "prev_hash": "9f2c6a0e" + "0" * 56,
    "hash": "41d07b3c" + "0" * 56,
}

EXAMPLES: dict[str, Example] = {
    # Audit and keys
    "AuditEntryRead": _AUDIT_ENTRY,
    "AuditPageRead": {"items": [_AUDIT_ENTRY], "next_cursor": 41},
    "KeyRotated": {"api_key": "fl_B_3q9v...", "previous_key_valid_until": "2026-11-24T09:40:41Z"},
    # Participants
    "ParticipantCreate": {
        "name": "D",
        "capacity": 100.0,
        "profile": {"site": "D"},
        "cost_model": _MM1,
    },
    "ParticipantCreated": {
        **_PARTICIPANT_READ,
        "id": 4,
        "name": "D",
        "profile": {"site": "D"},
        "liveness": "unknown",
        "endpoint": None,
        "last_heartbeat_at": None,
        "api_key": "fl_Qm8xV2pL9sT4nR7cY1wK5hB3jD6fG0aZ-uE_iO2vXyN",
    },
    "ParticipantRead": _PARTICIPANT_READ,
    "ParticipantPublic": {
        "id": 2,
        "name": "B",
        "profile": {"site": "B"},
        "status": "active",
        "liveness": "online",
        "failed_at": None,
    },
    "ParticipantEndpoint": {"name": "B", "endpoint": "grpc://10.0.0.2:7001", "liveness": "online"},
    "ParticipantStatus": "active",
    "ParticipantStatusUpdate": {"status": "suspended"},
    # A late heartbeat of a participant the registry declared failed: it must drop what it ran
    # and rejoin.
    "HeartbeatAnswer": {
        **_PARTICIPANT_READ,
        "liveness": "failed",
        "failed_at": "2026-11-24T09:12:41Z",
        "fenced": True,
        "heartbeat_interval_seconds": 1.0,
        "heartbeat_misses": 3,
    },
    "Rejoined": {**_PARTICIPANT_READ, "was_fenced": True},
    "Heartbeat": {
        "endpoint": "grpc://10.0.0.1:7001",
        "load": 92.0,
        "marginal_cost": 1.9,
        "threshold": 79.5,
        "node_state": "STABLE",
        "fragments": ["netmon-fragments"],
    },
    # Contracts
    "ContractCreate": {**_CONTRACT_TERMS, "partner": "B"},
    "ContractCounter": {**_CONTRACT_TERMS, "price_max": 0.25, "version": 1},
    "ContractRead": {
        "id": 1,
        "status": "active",
        "version": 3,
        "proposer": "A",
        "partner": "B",
        "terms_author": "B",
        **_CONTRACT_TERMS,
        "price_max": 0.25,
        "settled_amount": 75.0,
        "created_at": _STARTS,
        "updated_at": _AT,
        "ended_at": None,
    },
    "ContractEventRead": {
        "version": 2,
        "action": "countered",
        "author": "B",
        "actor": "B",
        "terms": {"price_min": 0.24, "price_max": 0.25, "min_move_seconds": 30.0},
        "at": "2026-11-24T09:01:00Z",
    },
    "ContractStatus": "active",
    "AvailabilityTerms": _AVAILABILITY,
    "Recovery": "precise",
    "VersionBody": {"version": 3},
    "LedgerEntryRead": _LEDGER_ENTRY,
    "LedgerRead": {
        "contract_id": 1,
        "entries": [_LEDGER_ENTRY],
        "balances": {"A": -75.0, "B": 75.0},
        "total_paid": 75.0,
    },
    # Tasks
    # A participant's own work: a SQL fragment over its source A.readings, written to Parquet.
    "TaskCreate": {
        "name": "A.daily",
        "inputs": [{"task": "A.readings"}],
        "sql": "SELECT window(ts, '1 day') AS day, station, avg(temp) AS mean_temp "
        "FROM readings GROUP BY window(ts, '1 day'), station",
        "watermark": "1 hour",
        "sink": {"kind": "parquet", "path": "/results/daily"},
    },
    "TaskInput": {"task": "A.conns"},
    "TaskInputRead": {
        "task": "A.readings",
        "fragment": None,
        "schema": "station string, ts timestamp, temp double, stime timestamp",
        "event_time": "ts",
        "served_by": "A",
        "active_copies": [],
    },
    "AnalysisReport": {
        "error": None,
        "output_schema": "day struct<start:timestamp,end:timestamp>, station string, "
        "mean_temp double, stime timestamp",
    },
    "TaskRead": {
        "id": 4,
        "name": "A.q01",
        "owner": "A",
        "host": "B",
        "load": 5.0,
        "contract_id": 1,
        "price": 0.25,
        "host_since": _LATER,
        "pinned": False,
        "lease_epoch": 2,
        "fragment": "connections_per_source",
        "params": {"window_seconds": 10, "threshold": 25},
        "inputs": [{"task": "A.conns", "fragment": "generator"}],
        "work": {},
        "synthetic": False,
        "output_schema": "stime TIMESTAMP, window_start TIMESTAMP, src_ip STRING, "
        "connections BIGINT",
        "analysis_error": None,
    },
    "TaskUpdate": {"load": 20.0, "pinned": False},
    "LeaseRead": {"task": "A.q01", "host": "B", "epoch": 2, "moving": False},
    # Offers
    "OfferCreate": {
        "contract_id": 1,
        "tasks": ["A.q01", "A.q03"],
        "replicas": [],
        "price": 0.25,
        "loads": {"A.q01": 5.0, "A.q03": 5.0},
        "relay_for": None,
        "reservation_price": 0.245,
    },
    "OfferAccept": {
        "version": 1,
        "tasks": ["A.q01"],
        "replicas": None,
        "reservation_price": 0.255,
    },
    "OfferDecision": {"version": 1},
    "OfferRead": {
        "id": 12,
        "contract_id": 1,
        "from": "A",
        "to": "B",
        "tasks": ["A.q01", "A.q03"],
        "replicas": [],
        "loads": {"A.q01": 5.0, "A.q03": 5.0},
        "accepted_tasks": ["A.q01"],
        "accepted_replicas": [],
        "price": 0.25,
        "agreed_price": 0.25,
        "status": "partially_accepted",
        "version": 2,
        "movement_ids": [31],
        "relay_for": None,
        "relay_chain": [],  # on main since this branch began; read schemas allow extra fields
        "created_at": _AT,
        "decided_at": _LATER,
    },
    "OfferStatus": "open",
    # Movements
    "MovementCreate": {"task": "C.q01", "to": "D", "reason": "failover"},
    "MovementCommit": {"epoch": 2},
    "MovementRead": {
        "id": 31,
        "task": "A.q01",
        "from": "A",
        "to": "B",
        "reason": "load",
        "status": "committed",
        "contract_id": 1,
        "offer_id": 12,
        "price": 0.25,
        "epoch": 2,
        "replica": False,
        "prepared_at": _AT,
        "finished_at": _LATER,
        "lease_seconds_left": None,
    },
    "MovementReason": "load",
    "MovementStatus": "committed",
    # Replicas and reconciliation permits
    "ReplicaCreate": {"k": 1, "technique": "active_standby"},
    "ReplicaRead": {
        "id": 5,
        "task": "C.q01",
        "host": "D",
        "technique": "active_standby",
        "load": 5.0,
        "price": 0.25,
        "contract_id": 4,
        "epoch": 1,
        "state": "STABLE",
        "reported_state": "STABLE",
        "host_liveness": "online",
        "state_at": _AT,
    },
    "ReplicaStateUpdate": {"state": "UP_FAILURE", "epoch": 1},
    "ReplicaTechnique": "active_standby",
    "PermitAsk": {"replica": "C.q01@D"},
    "PermitRead": _PERMIT,
    "PermitDecision": {**_PERMIT, "replica": "C.q01@D", "granted": True, "serving": ["C"]},
    "TokenRequest": {"operations": ["read", "ack"], "stream": "C.q00.out", "consumer": "C.q01"},
    "TokenRead": {
        "token": "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJhdWQiOiJDIn0.c2lnbmF0dXJl",
        "serving": "C",
        "expires_at": _AT,
    },
    "DataplaneKeyRead": {
        "issuer": "fedload",
        "algorithm": "EdDSA",
        "public_keys": [
            "-----BEGIN PUBLIC KEY-----\n"
            "MCowBQYDK2VwAyEA3L1g8C1FZ0sH2p6e8m7yv0bXb9xvYkQ8rG2mJb7vJ0E=\n"
            "-----END PUBLIC KEY-----\n"
        ],
    },
    # Errors (FastAPI's own schemas for request validation)
    # The service's error bodies (app/openapi.py publishes their schemas).
    "Error": {"detail": "contract 7 is at version 3, not 2; read it again", "field": "version"},
    "HTTPValidationError": {
        "detail": "price: Input should be greater than 0",
        "field": "price",
        "errors": [{"field": "price", "message": "Input should be greater than 0"}],
    },
}


def add_examples(openapi: dict[str, Any], examples: dict[str, Example] | None = None) -> None:
    """Give each component schema its example, in place; schemas without one are left as they
    are (the test names them)."""
    chosen = EXAMPLES if examples is None else examples
    for name, schema in openapi.get("components", {}).get("schemas", {}).items():
        if name in chosen:
            # JSON Schema 2020-12's keyword (OpenAPI 3.1); Swagger UI and ReDoc show the first
            # as the sample body.
            schema["examples"] = [chosen[name]]


def install_examples(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the document with the examples applied (once, cached)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi_with_examples() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            add_examples(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi_with_examples  # type: ignore[method-assign]
