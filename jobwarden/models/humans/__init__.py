"""What people decide and are told: approvals, escalations, identity, stop requests, notices.

Pure: imports only the standard library and ``jobwarden.models``. Its SQL:
``models/persistence/api_store.py`` and ``notification_store.py``.
"""
