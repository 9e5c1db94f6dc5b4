"""The HTTP door's ORM tables (models/persistence/api_tables.py) and migration 0008 agree."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, create_engine

from jobwarden.models.persistence import api_tables
from jobwarden.models.persistence.tables import Base

OURS = {
    api_tables.ApiTokenRow.__tablename__,
    api_tables.ApiTenantRow.__tablename__,
    api_tables.IntakeLogRow.__tablename__,
}


def _table_of(diff: Any) -> str | None:
    """The table a compare_metadata entry is about (entries are tuples or lists of them)."""
    item = diff[0] if isinstance(diff, list) else diff
    for part in item[1:]:
        if isinstance(part, str) and part in OURS:
            return part
        if isinstance(part, Table):
            return str(part.name)
        table = getattr(part, "table", None)  # a column, index or constraint
        if isinstance(table, Table):
            return str(table.name)
    return None


def test_the_api_tables_and_migration_0008_are_in_step(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = create_engine(database_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert [d for d in diff if _table_of(d) in OURS] == []
