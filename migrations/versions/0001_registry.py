"""registry: participants contracts tasks movements audit

Revision ID: 0001
Revises:
Create Date: 2026-11-22 16:14:08.095282
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("entity_type", sa.String(length=32), nullable=False),
        sa.Column("entity_id", sa.Integer(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_log_action"), ["action"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_log_at"), ["at"], unique=False)

    op.create_table(
        "participants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("capacity", sa.Float(), nullable=False),
        sa.Column("profile", sa.JSON(), nullable=False),
        sa.Column("cost_model", sa.JSON(), nullable=False),
        sa.Column("api_key_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "status",
            sa.Enum("active", "suspended", name="participantstatus", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("liveness", sa.String(length=16), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("endpoint", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("capacity > 0", name=op.f("ck_participants_capacity_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_participants")),
        sa.UniqueConstraint("api_key_hash", name=op.f("uq_participants_api_key_hash")),
        sa.UniqueConstraint("name", name=op.f("uq_participants_name")),
    )
    op.create_table(
        "contracts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("proposer_id", sa.Integer(), nullable=False),
        sa.Column("partner_id", sa.Integer(), nullable=False),
        sa.Column("price_min", sa.Float(), nullable=False),
        sa.Column("price_max", sa.Float(), nullable=False),
        sa.Column("starts_at", sa.DateTime(), nullable=False),
        sa.Column("ends_at", sa.DateTime(), nullable=False),
        sa.Column("min_move_seconds", sa.Float(), nullable=False),
        sa.Column(
            "recovery",
            sa.Enum("gap", "rollback", "precise", name="recovery", native_enum=False, length=16),
            nullable=True,
        ),
        sa.Column("max_delay_seconds", sa.Float(), nullable=True),
        sa.Column("replica_hosting", sa.Boolean(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "proposed",
                "countered",
                "active",
                "rejected",
                "expired",
                "terminated",
                name="contractstatus",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("terms_author_id", sa.Integer(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("settled_amount", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.CheckConstraint("ends_at > starts_at", name=op.f("ck_contracts_term_ordered")),
        sa.CheckConstraint(
            "min_move_seconds >= 0", name=op.f("ck_contracts_min_move_non_negative")
        ),
        sa.CheckConstraint("price_min <= price_max", name=op.f("ck_contracts_price_range_ordered")),
        sa.CheckConstraint("price_min > 0", name=op.f("ck_contracts_price_min_positive")),
        sa.CheckConstraint(
            "proposer_id <> partner_id", name=op.f("ck_contracts_two_distinct_parties")
        ),
        sa.ForeignKeyConstraint(
            ["partner_id"], ["participants.id"], name=op.f("fk_contracts_partner_id_participants")
        ),
        sa.ForeignKeyConstraint(
            ["proposer_id"], ["participants.id"], name=op.f("fk_contracts_proposer_id_participants")
        ),
        sa.ForeignKeyConstraint(
            ["terms_author_id"],
            ["participants.id"],
            name=op.f("fk_contracts_terms_author_id_participants"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contracts")),
    )
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_contracts_partner_id"), ["partner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_contracts_proposer_id"), ["proposer_id"], unique=False)

    op.create_table(
        "participant_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("load", sa.Float(), nullable=False),
        sa.Column("marginal_cost", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=True),
        sa.Column("node_state", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_participant_samples_participant_id_participants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_participant_samples")),
    )
    with op.batch_alter_table("participant_samples", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_participant_samples_at"), ["at"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_participant_samples_participant_id"), ["participant_id"], unique=False
        )

    op.create_table(
        "contract_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("contract_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("author_id", sa.Integer(), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("terms", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["author_id"],
            ["participants.id"],
            name=op.f("fk_contract_events_author_id_participants"),
        ),
        sa.ForeignKeyConstraint(
            ["contract_id"],
            ["contracts.id"],
            name=op.f("fk_contract_events_contract_id_contracts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contract_events")),
    )
    with op.batch_alter_table("contract_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_contract_events_contract_id"), ["contract_id"], unique=False
        )

    op.create_table(
        "offers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("contract_id", sa.Integer(), nullable=False),
        sa.Column("from_id", sa.Integer(), nullable=False),
        sa.Column("to_id", sa.Integer(), nullable=False),
        sa.Column("task_ids", sa.JSON(), nullable=False),
        sa.Column("accepted_task_ids", sa.JSON(), nullable=False),
        sa.Column("price", sa.Float(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "open",
                "accepted",
                "partially_accepted",
                "rejected",
                "withdrawn",
                "expired",
                name="offerstatus",
                native_enum=False,
                length=24,
            ),
            nullable=False,
        ),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["contract_id"], ["contracts.id"], name=op.f("fk_offers_contract_id_contracts")
        ),
        sa.ForeignKeyConstraint(
            ["from_id"], ["participants.id"], name=op.f("fk_offers_from_id_participants")
        ),
        sa.ForeignKeyConstraint(
            ["to_id"], ["participants.id"], name=op.f("fk_offers_to_id_participants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_offers")),
    )
    with op.batch_alter_table("offers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_offers_contract_id"), ["contract_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_offers_from_id"), ["from_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_offers_to_id"), ["to_id"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("load", sa.Float(), nullable=False),
        sa.Column("contract_id", sa.Integer(), nullable=True),
        sa.Column("price", sa.Float(), nullable=True),
        sa.Column("host_since", sa.DateTime(), nullable=False),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("lease_epoch", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("load >= 0", name=op.f("ck_tasks_load_non_negative")),
        sa.ForeignKeyConstraint(
            ["contract_id"], ["contracts.id"], name=op.f("fk_tasks_contract_id_contracts")
        ),
        sa.ForeignKeyConstraint(
            ["host_id"], ["participants.id"], name=op.f("fk_tasks_host_id_participants")
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["participants.id"], name=op.f("fk_tasks_owner_id_participants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("name", name=op.f("uq_tasks_name")),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_host_id"), ["host_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_tasks_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("contract_id", sa.Integer(), nullable=False),
        sa.Column("payer_id", sa.Integer(), nullable=False),
        sa.Column("payee_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("load", sa.Float(), nullable=False),
        sa.Column("price", sa.Float(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("amount", sa.Float(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("amount >= 0", name=op.f("ck_ledger_entries_amount_non_negative")),
        sa.CheckConstraint("payer_id <> payee_id", name=op.f("ck_ledger_entries_distinct_parties")),
        sa.ForeignKeyConstraint(
            ["contract_id"],
            ["contracts.id"],
            name=op.f("fk_ledger_entries_contract_id_contracts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["payee_id"], ["participants.id"], name=op.f("fk_ledger_entries_payee_id_participants")
        ),
        sa.ForeignKeyConstraint(
            ["payer_id"], ["participants.id"], name=op.f("fk_ledger_entries_payer_id_participants")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_ledger_entries_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
    )
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_ledger_entries_contract_id"), ["contract_id"], unique=False
        )

    op.create_table(
        "movements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("from_id", sa.Integer(), nullable=False),
        sa.Column("to_id", sa.Integer(), nullable=False),
        sa.Column("contract_id", sa.Integer(), nullable=True),
        sa.Column("offer_id", sa.Integer(), nullable=True),
        sa.Column(
            "reason",
            sa.Enum(
                "load",
                "move_back",
                "failover",
                "replica_switch",
                "reconciliation",
                name="movementreason",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column(
            "status",
            sa.Enum(
                "prepared",
                "committed",
                "aborted",
                name="movementstatus",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("price", sa.Float(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("prepared_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["contract_id"], ["contracts.id"], name=op.f("fk_movements_contract_id_contracts")
        ),
        sa.ForeignKeyConstraint(
            ["from_id"], ["participants.id"], name=op.f("fk_movements_from_id_participants")
        ),
        sa.ForeignKeyConstraint(
            ["offer_id"], ["offers.id"], name=op.f("fk_movements_offer_id_offers")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_movements_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["to_id"], ["participants.id"], name=op.f("fk_movements_to_id_participants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_movements")),
    )
    with op.batch_alter_table("movements", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_movements_task_id"), ["task_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("movements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_movements_task_id"))

    op.drop_table("movements")
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ledger_entries_contract_id"))

    op.drop_table("ledger_entries")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tasks_owner_id"))
        batch_op.drop_index(batch_op.f("ix_tasks_host_id"))

    op.drop_table("tasks")
    with op.batch_alter_table("offers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_offers_to_id"))
        batch_op.drop_index(batch_op.f("ix_offers_from_id"))
        batch_op.drop_index(batch_op.f("ix_offers_contract_id"))

    op.drop_table("offers")
    with op.batch_alter_table("contract_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_contract_events_contract_id"))

    op.drop_table("contract_events")
    with op.batch_alter_table("participant_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_participant_samples_participant_id"))
        batch_op.drop_index(batch_op.f("ix_participant_samples_at"))

    op.drop_table("participant_samples")
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_contracts_proposer_id"))
        batch_op.drop_index(batch_op.f("ix_contracts_partner_id"))

    op.drop_table("contracts")
    op.drop_table("participants")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_log_at"))
        batch_op.drop_index(batch_op.f("ix_audit_log_action"))

    op.drop_table("audit_log")
