"""Alembic environment: the URL comes from the caller's config or JOBWARDEN_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from jobwarden.config.settings import get_settings

# Every module that declares tables, so autogenerate and `alembic check` see them all.
from jobwarden.models.persistence import (  # noqa: F401
    breaker_tables,
    metrics_tables,
    notification_tables,
    pause_tables,
    schedule_tables,
    webhook_tables,
)
from jobwarden.models.persistence.tables import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url") or get_settings().database_url
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
