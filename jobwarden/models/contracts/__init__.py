"""Provider contracts: the TOML file's tables as typed values, loaded, validated and pinned.

Pure: imports only the standard library, pydantic, jsonschema and ``jobwarden.models``.
Where pinned contracts are stored: ``models/persistence/contract_store.py``.
"""
