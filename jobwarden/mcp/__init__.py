"""The MCP door: the tools an AI agent is given (the ``mcp`` SDK), under a token's scopes.

May import: ``jobwarden.models``, ``jobwarden.tasks``, ``jobwarden.config``,
``jobwarden.observability``.
"""
