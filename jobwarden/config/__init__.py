"""Settings, the Celery app and beat schedule, and the shipped provider contracts.

``settings`` reads the environment (pydantic-settings); ``celery_app`` wires the tasks;
``providers/`` holds the contract files the loader ships. May import ``jobwarden.models``
and ``jobwarden.observability``; never a door.
"""
