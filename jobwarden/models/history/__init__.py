"""The per-operation event chain: kinds, hashing, row facts, excerpts, archives, verify, receipts.

Pure: imports only the standard library, ``rfc8785``, ``cryptography`` (the receipts'
Ed25519 signatures: computation, no I/O) and ``jobwarden.models``. Its SQL:
``models/persistence/history_store.py`` and ``store.py``.
"""
