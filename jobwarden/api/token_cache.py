"""Principals of recently used API tokens, per API process, forgotten at a revocation.

Every request looked its token up in Postgres (a round trip of the intake's two, and
~8 % of its CPU). A live token's principal is kept here, under the revocation epoch read
before its lookup (jobwarden/tasks/humans/revocations.py); a request answers from memory
only when the epoch it reads now is the same, so the first request after ``jobwarden
tokens revoke`` on every process finds the cache emptied and looks its token up. An
entry also expires ``JOBWARDEN_API_TOKEN_CACHE_SECONDS`` after its lookup (fixed then,
never extended by use): the bound for a revocation Redis did not hear of (SQL by hand,
Redis down during ``revoke``), and how often a token's last use is recorded. Only live
tokens are kept: an unknown or revoked one is looked up every time, so a new token
works at once. Keys are the tokens' sha256 digests, never the tokens themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from jobwarden.tasks.humans.principals import Principal

# Bounds the memory a flood of distinct tokens could take; reaching it starts afresh.
MAX_ENTRIES = 10_000


class TokenCache:
    def __init__(self, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive; without a cache pass None")
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._epoch: str | None = None
        self._lock = threading.Lock()

    def _at(self, epoch: str) -> None:
        # Another epoch: a token may have been revoked since anything here was looked up.
        if epoch != self._epoch:
            self._entries.clear()
            self._epoch = epoch

    def get(self, digest: str, epoch: str) -> Principal | None:
        """The principal looked up under ``epoch`` less than ttl_seconds ago, else None."""
        with self._lock:
            self._at(epoch)
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if self.clock() >= entry[0]:
                del self._entries[digest]
                return None
            return entry[1]

    def put(self, digest: str, principal: Principal, epoch: str) -> None:
        """Keep a principal looked up after ``epoch`` was read (read before the lookup, so
        a revocation committed during it moved the epoch on). Not kept if another request
        saw a newer epoch meanwhile: epochs are random, so which is newer is unknown."""
        with self._lock:
            if epoch != self._epoch:
                return
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[digest] = (self.clock() + self.ttl_seconds, principal)
