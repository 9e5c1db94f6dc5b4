"""What one write must do: the row changes, the history events and the next wake-up.

``models/effects.py`` builds a ``Plan`` from a decided action; ``models/reservations.py``
settles it (the reserved status request folded in, the next one reserved); the store
writes it in one fenced transaction. Its own module, so the modules that build, settle
and write plans each import it without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from jobwarden.models.history.chain import EventDraft
from jobwarden.models.operation import RowChanges
from jobwarden.models.results.validation import ResultVerdict


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResult:
    """The collected bytes with their integrity data, written with ``succeeded``."""

    content: bytes | None  # inline bytes (at most results.INLINE_LIMIT), or None
    content_type: str | None
    verdict: ResultVerdict
    location: str | None = None  # where the result store holds the bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    changes: RowChanges = field(default_factory=RowChanges)
    events: tuple[EventDraft, ...] = ()
    next_at: datetime | None = None  # publish a wake-up for this time (None: nothing)
    result: StoredResult | None = None
    # The decision was to wait (a Wait, or an Accept's first wait): only such a plan
    # reserves the next status request when it is settled (models/reservations.py), so a
    # recorded step failure (a Move to the same state) never counts one nobody decided on.
    waits: bool = False

    @property
    def empty(self) -> bool:
        return not self.changes and not self.events
