"""Results: collection, allowed origins, paging, digests, validation, items, where bytes live.

Results: entering collection, fetching only from allowed origins, paging, digests, validation,
per-item outcomes and where the bytes live.

Pure: imports only the standard library, jsonschema and ``jobwarden.models``. Its SQL:
``models/persistence/result_rows.py``.
"""
