"""The shell: Celery tasks that load an operation, call one decision, persist once, reschedule.

Also the provider edge (httpx), leases in Redis, intake, result storage and the
runtime that wires them. May import ``jobwarden.models``, ``jobwarden.config`` and
``jobwarden.observability``; never a door.
"""
