"""Every ORM model, imported here so Alembic's autogenerate sees the whole schema."""

from app.models.audit import AuditEntry, AuditHead, AuditSubject
from app.models.contract import Contract, ContractEvent, ContractStatus, LedgerEntry, Recovery
from app.models.movement import (
    MARKET_REASONS,
    Movement,
    MovementReason,
    MovementStatus,
    Offer,
    OfferStatus,
)
from app.models.participant import (
    Participant,
    ParticipantFailure,
    ParticipantSample,
    ParticipantStatus,
)
from app.models.permit import ReconciliationPermit
from app.models.replica import Replica, ReplicaTechnique
from app.models.task import Task

__all__ = [
    "MARKET_REASONS",
    "AuditEntry",
    "AuditHead",
    "AuditSubject",
    "Contract",
    "ContractEvent",
    "ContractStatus",
    "LedgerEntry",
    "Movement",
    "MovementReason",
    "MovementStatus",
    "Offer",
    "OfferStatus",
    "Participant",
    "ParticipantFailure",
    "ParticipantSample",
    "ParticipantStatus",
    "ReconciliationPermit",
    "Recovery",
    "Replica",
    "ReplicaTechnique",
    "Task",
]
