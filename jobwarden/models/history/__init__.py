"""The per-operation event chain: kinds, hashing, bound row facts, excerpts, archives, verify.

Pure: imports only the standard library and ``jobwarden.models``. Its SQL:
``models/persistence/history_store.py`` and ``store.py``.
"""
