"""The MCP door: the tools an AI agent is given (the ``mcp`` SDK), under a token's scopes.

May import: ``jobwarden.models``, ``jobwarden.tasks``, ``jobwarden.config``,
``jobwarden.observability``, and ``jobwarden.api``, whose tokens, intake and views it
shares so the two doors answer alike.
"""
