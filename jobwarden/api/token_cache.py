"""Principals of recently used API tokens, per API process, for a few seconds at most.

Every request looked its token up in Postgres (a session, a round trip, ~8 % of an
intake request's CPU). With ``JOBWARDEN_API_TOKEN_CACHE_SECONDS`` > 0 a token found
live is answered from memory until that many seconds after the lookup; the expiry is
fixed at the lookup, never extended by use, so a revoked token stops working in every
process at most that long after ``jobwarden tokens revoke``. Only live tokens are
kept: an unknown or revoked one is looked up every time, so a new token works at once.
Keys are the tokens' sha256 digests, never the tokens themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from jobwarden.api.auth import Principal

# Bounds the memory a flood of distinct tokens could take; reaching it starts afresh.
MAX_ENTRIES = 10_000


class TokenCache:
    def __init__(self, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive; without a cache pass None")
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str) -> Principal | None:
        """The principal looked up less than ttl_seconds ago, else None."""
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if self.clock() >= entry[0]:
                del self._entries[digest]
                return None
            return entry[1]

    def put(self, digest: str, principal: Principal) -> None:
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[digest] = (self.clock() + self.ttl_seconds, principal)
