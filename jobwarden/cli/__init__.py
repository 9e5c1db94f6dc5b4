"""The command-line door: ``jobwarden`` and its sub-commands (typer).

Lives here: the commands (``main``), the CLI's identity (a token or break-glass), and one
module per command group. May import: ``jobwarden.models``, ``jobwarden.tasks``,
``jobwarden.config``, ``jobwarden.observability``; ``jobwarden.api``, ``jobwarden.mcp`` and
``jobwarden.demo`` only inside the command that starts them (each is an optional extra).
"""
