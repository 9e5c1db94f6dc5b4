"""Published long-running-operation conventions (Azure guidelines, ARM RPC) as pure strategies.

Pure: imports only the standard library and ``jobwarden.models``.
"""
