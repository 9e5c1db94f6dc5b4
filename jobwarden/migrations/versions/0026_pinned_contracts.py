"""provider_contracts and operations.contract_digest: contracts are pinned (issue 33,
DESIGN.md invariant 16)

A contract edited while operations run changed how every running operation was read.
Now each operation records the sha256 of the contract text it was created under, and
that text is kept by digest in ``provider_contracts`` (written once, never changed), so
a running operation is polled, cancelled and collected under the same contract until a
person moves it (a recorded decision).

Existing operations keep ``contract_digest`` NULL and are read under the current
contract, as before: their text was never recorded, and guessing it would be worse.
The new column is nullable without a default (no table rewrite) and not indexed (a poll
that does not move it stays a HOT update); its foreign key is checked on insert and on
a move only.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_contracts",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_provider_contracts"),
    )
    op.add_column("operations", sa.Column("contract_digest", sa.String(64), nullable=True))
    op.create_foreign_key(
        "fk_operations_contract_digest",
        "operations",
        "provider_contracts",
        ["contract_digest"],
        ["digest"],
    )


def downgrade() -> None:
    op.drop_constraint("fk_operations_contract_digest", "operations", type_="foreignkey")
    op.drop_column("operations", "contract_digest")
    op.drop_table("provider_contracts")
