"""Shared fixtures: a scratch database per test run, a Redis key prefix per run.

Tests talk to the real Postgres and Redis on localhost; isolation is by
database name and key prefix, never by faking a server.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

RUN_ID = secrets.token_hex(4)
ADMIN_URL = os.environ.get(
    "JOBWARDEN_TEST_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TEST_DB = f"jobwarden_test_{RUN_ID}"


def _scrub_env() -> None:
    for name in list(os.environ):
        if name.startswith("JOBWARDEN_") and name != "JOBWARDEN_TEST_ADMIN_URL":
            del os.environ[name]


_scrub_env()
os.environ["JOBWARDEN_DATABASE_URL"] = ADMIN_URL.rsplit("/", 1)[0] + f"/{TEST_DB}"
os.environ["JOBWARDEN_KEY_PREFIX"] = f"jwtest-{RUN_ID}"
os.environ["JOBWARDEN_QUEUE"] = f"jwtest-{RUN_ID}"


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    from sqlalchemy import create_engine, text

    from jobwarden.models.db import dispose_all
    from jobwarden.models.migrate import upgrade

    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{TEST_DB}"'))
    url = os.environ["JOBWARDEN_DATABASE_URL"]
    upgrade(url)
    yield url
    dispose_all()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)'))
    admin.dispose()
