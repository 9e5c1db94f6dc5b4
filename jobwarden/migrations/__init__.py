"""Alembic migrations of the Postgres schema, one chain, applied by ``jobwarden migrate``.

Each revision is plain SQL through Alembic's ``op``; nothing imports a migration but
``models/persistence/migrate.py``.
"""
