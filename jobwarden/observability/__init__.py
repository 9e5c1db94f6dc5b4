"""What an operator sees: structured logs, metrics, traces, and the story of an operation.

Lives here: structured logs (structlog), Prometheus collectors, OpenTelemetry set-up and
spans, and the one-line rendering of history events. May import: ``jobwarden.models``;
never ``jobwarden.config``, a door (``api``, ``cli``, ``console``, ``mcp``) or ``tasks``.
"""
