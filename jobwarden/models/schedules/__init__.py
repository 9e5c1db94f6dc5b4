"""Schedules: which slots are due and what becomes of each, and the schedule files.

Pure: imports only the standard library, croniter and ``jobwarden.models``. Its SQL:
``models/persistence/schedule_store.py``.
"""
