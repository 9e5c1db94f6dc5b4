"""operations: authorized_by, one spelling with the authorization_denied reason

The column was spelt ``authorised_by`` while the escalation reason, the HTTP header
and every provider's API say "authorization"; one word everywhere. Postgres renames
the column inside the CHECK that names it; the constraint is renamed to match. The
row digest keeps the fact's old name (models/history/row_facts.py ``DIGESTED_AS``), so every
history written before this still verifies. Workers of the old release must be
stopped before it runs: they would write the old column name.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _rename_check(old: str, new: str) -> None:
    # A database migrated before 0011 may hold the name prefixed twice (see 0011).
    for prefix in ("ck_operations_", "ck_operations_ck_operations_"):
        op.execute(
            "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_constraint "
            f"WHERE conname = '{prefix}{old}') THEN "
            f"ALTER TABLE operations RENAME CONSTRAINT {prefix}{old} TO {prefix}{new}; "
            "END IF; END $$"
        )


def upgrade() -> None:
    op.execute("ALTER TABLE operations RENAME COLUMN authorised_by TO authorized_by")
    _rename_check("authorised_before_create", "authorized_before_create")


def downgrade() -> None:
    _rename_check("authorized_before_create", "authorised_before_create")
    op.execute("ALTER TABLE operations RENAME COLUMN authorized_by TO authorised_by")
