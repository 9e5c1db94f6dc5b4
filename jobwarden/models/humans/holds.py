"""The hold an operation's snapshot carries: the active pause that covers it, if any.

Its own module, beside the decisions in ``pauses``, so the snapshot (``operation.py``)
can hold one without importing the decisions that read the snapshot. Pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Hold:
    """The oldest active pause whose scope covers the operation (read with the row)."""

    pause_id: uuid.UUID
    author: str  # the actor who paused, as events name it (token:alice, rule:breaker)
    reason: str
    started_at: datetime
    # A provider breaker's half-open probe: the one operation whose requests may leave while
    # the pause holds the rest (models/provider/breaker.py); None for every other pause.
    probe: uuid.UUID | None = None

    @classmethod
    def from_mapping(cls, found: Mapping[str, Any]) -> Hold:
        """As the load query builds it (a JSON object: text id, ISO time), or typed."""
        pause_id, started = found["pause_id"], found["started_at"]
        probe = found.get("probe")
        return cls(
            pause_id=pause_id if isinstance(pause_id, uuid.UUID) else uuid.UUID(str(pause_id)),
            author=str(found["author"]),
            reason=str(found["reason"]),
            started_at=(
                started if isinstance(started, datetime) else datetime.fromisoformat(str(started))
            ),
            probe=(
                None
                if probe is None
                else probe
                if isinstance(probe, uuid.UUID)
                else uuid.UUID(str(probe))
            ),
        )
