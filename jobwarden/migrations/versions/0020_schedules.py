"""schedules: durable schedules, one row per decided slot, and who changed what (issue 22)

A slot is claimed by inserting its (schedule, slot time) row: the primary key is what
makes two beats, a restart or a backfill decide it once. States, policies and actions
are spelled out here, not imported from the live enums: a migration must keep meaning
what it meant when it was written.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

STATUSES = "'active', 'paused'"
POLICIES = "'skip', 'buffer_one', 'allow_all', 'cancel_previous'"
SLOT_STATES = "'submitting', 'fired', 'skipped', 'missed', 'buffered', 'refused'"
ORIGINS = "'beat', 'trigger', 'backfill'"
ACTIONS = "'declared', 'paused', 'resumed', 'triggered', 'backfilled'"


def upgrade() -> None:
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "schedules",
        sa.Column("schedule_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), server_default="active", nullable=False),
        sa.Column("cron", sa.String(200), nullable=True),
        sa.Column("interval_seconds", sa.Integer(), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("start_at", tz, nullable=True),
        sa.Column("end_at", tz, nullable=True),
        sa.Column("jitter_seconds", sa.Integer(), server_default="0", nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("command", postgresql.JSONB(), nullable=False),
        sa.Column("concurrency_key", sa.String(200), nullable=True),
        sa.Column("overlap", sa.String(20), nullable=False),
        sa.Column("catchup_window_seconds", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("next_slot_at", tz, nullable=True),
        sa.Column("next_due_at", tz, nullable=True),
        sa.Column("created_at", tz, nullable=False),
        sa.Column("updated_at", tz, nullable=False),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.PrimaryKeyConstraint("schedule_id", name="pk_schedules"),
        sa.UniqueConstraint("tenant", "name", name="uq_schedules_tenant_name"),
        sa.CheckConstraint(f"status IN ({STATUSES})", name=op.f("ck_schedules_status_known")),
        sa.CheckConstraint(f"overlap IN ({POLICIES})", name=op.f("ck_schedules_overlap_known")),
        sa.CheckConstraint(
            "(cron IS NULL) <> (interval_seconds IS NULL)", name=op.f("ck_schedules_one_timing")
        ),
        sa.CheckConstraint("version >= 1", name=op.f("ck_schedules_version_positive")),
    )
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_due_at"],
        postgresql_where=sa.text("status = 'active' AND next_due_at IS NOT NULL"),
    )
    op.create_table(
        "schedule_slots",
        sa.Column("schedule_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("slot_at", tz, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("origin", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("requested_by", sa.String(200), nullable=False),
        sa.Column("decided_at", tz, nullable=False),
        sa.Column("cancel_previous", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.PrimaryKeyConstraint("schedule_id", "slot_at", name="pk_schedule_slots"),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.schedule_id"],
            name="fk_schedule_slots_schedule_id",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(f"state IN ({SLOT_STATES})", name=op.f("ck_schedule_slots_state_known")),
        sa.CheckConstraint(f"origin IN ({ORIGINS})", name=op.f("ck_schedule_slots_origin_known")),
        sa.CheckConstraint(
            "state <> 'fired' OR operation_id IS NOT NULL",
            name=op.f("ck_schedule_slots_fired_has_op"),
        ),
    )
    op.create_index(
        "ix_schedule_slots_pending",
        "schedule_slots",
        ["decided_at"],
        postgresql_where=sa.text("state IN ('submitting', 'buffered')"),
    )
    op.create_index(
        "ix_schedule_slots_missed",
        "schedule_slots",
        ["schedule_id"],
        postgresql_where=sa.text("state = 'missed'"),
    )
    op.create_table(
        "schedule_actions",
        sa.Column("action_id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("schedule_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("at", tz, nullable=False),
        sa.Column("detail", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("action_id", name="pk_schedule_actions"),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.schedule_id"],
            name="fk_schedule_actions_schedule_id",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(f"action IN ({ACTIONS})", name=op.f("ck_schedule_actions_action_known")),
    )
    op.create_index("ix_schedule_actions_schedule_id", "schedule_actions", ["schedule_id"])


def downgrade() -> None:
    op.drop_table("schedule_actions")
    op.drop_table("schedule_slots")
    op.drop_table("schedules")
