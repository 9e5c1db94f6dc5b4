"""Named fault points: no-ops in production, armed by tests through Redis.

Set JOBWARDEN_FAULTS_ENABLED=1 in a worker's environment, then a test arms a
point for one operation (scoped by its idempotency key, known before submit):
`arm(redis, prefix, "after_create_response", key, "block:30")`. Each arming
fires once (GETDEL), and the firing process records its pid so the test can
kill exactly that worker.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

ENABLED = os.environ.get("JOBWARDEN_FAULTS_ENABLED") == "1"

# Every named point the shell passes through; tests/acceptance arms each one at least once.
POINTS: frozenset[str] = frozenset(
    {
        "after_lease",
        "after_create_sent_commit",
        "after_create_response",
        "after_accept_commit",
        "after_reconcile_claim",
        "after_reconcile_response",
        "after_poll_claim",
        "after_poll_response",
        "after_cancel_claim",
        "after_cancel_response",
        "after_collect_claim",
        "after_collect_response",
        "after_cleanup_claim",
        "after_cleanup_response",
        "before_schedule",
        "before_hand_over",
        # The schedules tick (tasks/schedules.py): a slot claimed, its submit not yet
        # made; and submitted, its operation not yet recorded on the slot.
        "schedule_after_claim",
        "schedule_after_submit",
        # An archiving run (tasks/history_archive.py), scoped by partition: a history's
        # segment recorded; and every one recorded, the partition not yet dropped.
        "archive_after_segment",
        "archive_before_drop",
    }
)


class InjectedFaultError(Exception):
    """Raised at an armed fault point with action 'raise'."""


def _key(prefix: str, name: str, scope: str) -> str:
    return f"{prefix}:fault:{name}:{scope}"


def fired_key(prefix: str, name: str, scope: str) -> str:
    return f"{prefix}:fault-fired:{name}:{scope}"


def arm(redis: Any, prefix: str, name: str, scope: str, action: str) -> None:
    """action: 'kill' (SIGKILL this process), 'raise', or 'block:<seconds>'."""
    redis.set(_key(prefix, name, scope), action)


def fault_point(redis: Any, prefix: str, name: str, scope: str) -> None:
    if not ENABLED:
        return
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}")
    action = redis.getdel(_key(prefix, name, scope))
    if action is None:
        return
    action = action.decode() if isinstance(action, bytes) else str(action)
    redis.set(fired_key(prefix, name, scope), str(os.getpid()), ex=600)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise InjectedFaultError(name)
    elif action.startswith("block:"):
        threading.Event().wait(float(action.split(":", 1)[1]))
