"""Alembic migrations of the Postgres schema, one chain, applied by ``jobwarden migrate``.

Each revision is plain SQL through Alembic's ``op``; nothing imports a migration: Alembic
loads them from the package resource ``models/persistence/migrate.py`` names
(``jobwarden:migrations``). May import: ``jobwarden.models`` (its tables) and
``jobwarden.config`` (the database URL).
"""
