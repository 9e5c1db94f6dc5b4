"""Named fault points: no-ops in production, armed by tests through Redis.

Set JOBWARDEN_FAULTS_ENABLED=1 in a worker's environment, then a test arms a
point with `arm(redis, prefix, "after_create_lease", "kill")`. Each arming
fires once (GETDEL), so a restarted worker process carries on normally.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

ENABLED = os.environ.get("JOBWARDEN_FAULTS_ENABLED") == "1"


class InjectedFaultError(Exception):
    """Raised at an armed fault point with action 'raise'."""


def _key(prefix: str, name: str) -> str:
    return f"{prefix}:fault:{name}"


def arm(redis: Any, prefix: str, name: str, action: str) -> None:
    """action: 'kill' (SIGKILL this process), 'raise', or 'block:<seconds>'."""
    redis.set(_key(prefix, name), action)


def fault_point(redis: Any, prefix: str, name: str) -> None:
    if not ENABLED:
        return
    action = redis.getdel(_key(prefix, name))
    if action is None:
        return
    action = action.decode() if isinstance(action, bytes) else str(action)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise InjectedFaultError(name)
    elif action.startswith("block:"):
        threading.Event().wait(float(action.split(":", 1)[1]))
