"""Whether a worker consumes the operations' queue: the no-worker warning (issue 36, point 5).

Workers write a heartbeat per queue they consume (tasks/heartbeat.py). A door that
records an operation reads the newest heartbeat on the operations' queue and the Redis
server's clock, and this module decides from those alone whether to warn that nothing
will pick the operation up: a submission made before any worker runs then says so at
once, instead of ending ``failed`` (``create_deadline_exceeded``) a minute later in
silence. Pure: the clock is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

# The warning's code in every door's answer (HTTP body, the Jobwarden-Warning header, MCP,
# the Celery task's answer).
NO_WORKER = "no_worker"


def unattended(last_beat: datetime | None, now: datetime, silence_seconds: float) -> bool:
    """True when no worker beat on the queue within ``silence_seconds`` before ``now``.

    ``last_beat`` None: no worker has beaten on it within the heartbeats' retention.
    A beat stamped after ``now`` (the same server's clock, read a moment apart) is fresh.
    """
    if last_beat is None:
        return True
    return (now - last_beat).total_seconds() > silence_seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class NoWorkerWarning:
    """Nothing has consumed ``queue`` lately: the operation waits until a worker starts."""

    queue: str
    # The newest heartbeat of any worker on the queue, if one is still kept.
    last_seen: datetime | None
    silence_seconds: float
    code: str = NO_WORKER

    @property
    def detail(self) -> str:
        seen = (
            f"last seen {self.last_seen.isoformat(timespec='seconds')}"
            if self.last_seen is not None
            else "none seen"
        )
        return (
            f"no worker has consumed queue {self.queue!r} in the last "
            f"{self.silence_seconds:g} s ({seen}); the operation waits until one starts: "
            f"celery -A jobwarden.config.celery_app worker -Q {self.queue}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "queue": self.queue,
            "last_seen": self.last_seen.isoformat() if self.last_seen is not None else None,
            "detail": self.detail,
        }


def no_worker_warning(
    queue: str, last_beat: datetime | None, now: datetime, silence_seconds: float
) -> NoWorkerWarning | None:
    """The warning a door gives for ``queue``, or None while a worker beats on it."""
    if not unattended(last_beat, now, silence_seconds):
        return None
    return NoWorkerWarning(queue=queue, last_seen=last_beat, silence_seconds=silence_seconds)
