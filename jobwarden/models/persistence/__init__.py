"""Persistence: the SQL of the domain, every table and store (SQLAlchemy 2, psycopg 3).

The rest of ``jobwarden.models`` is the pure core and imports none of these
(tests/unit/test_import_rules.py holds it to that as a folder rule). ``tables`` and
``api_tables`` / ``webhook_tables`` / ``pause_tables`` declare the schema that
``migrations/`` creates;
``db`` owns engines and the step session; each ``*_store`` is the SQL of one concern,
and ``store`` the operation row and its event chain; ``migrate`` runs Alembic. Outside
it only probes and set-up touch Postgres: the API's readiness ``SELECT 1`` and the demo's
``CREATE DATABASE``.
"""
