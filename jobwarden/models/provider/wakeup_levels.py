"""Fair order in the broker: which priority level a tenant's wake-up message is published at.

The shared limiter (``fair_shares.py``) gives each tenant its share of a provider's rate,
but only to requests that reach it. Before that, every step's wake-up waits in the
broker's queue, and a Redis list is first in, first out: a tenant that submitted 300
operations at once puts 300 messages ahead of another tenant's 3, each costing a worker a
load, a limiter call and a reschedule before the small tenant's turn comes (issue 39:
seen ~7 s of queueing for requests that then waited under 1 s at the limiter).

So wake-ups of operations at a rate-limited provider are published at a priority level
from their tenant's backlog there: the number of that tenant's wake-ups at that provider
published and not yet started, this one included, per unit of its weight. A tenant's
n-th waiting wake-up (``n`` counted per unit of weight) goes to level ``floor(log2 n)``:
its first at level 0, its 2nd and 3rd at 1, its 4th to 7th at 2, ..., from its 512th on at
``LEVELS - 1``. Within a tenant the operation's ``priority`` moves a wake-up one level
forward (above 0) or back (below 0). Workers take the lowest level first (kombu's Redis
transport: level 0 is the queue's own list, polled first; ``config/celery_app.py``).

The bound (docs/scaling.md, "Fair order in the broker"). At any moment another tenant of
weight ``w'`` has at most ``w' * (2 ** (L + 2) - 1)`` messages waiting at levels ``L``
or below. Proof: take the latest published of its messages waiting at level ``<= L``; when it
was published every other one of them was already waiting and counted, so its count
``n`` was at least their number, and its level ``floor(log2 ceil(n / w'))`` minus one for
priority is at most ``L``, so ``ceil(n / w') < 2 ** (L + 2)``. A message at level ``L`` thus waits
behind fewer than that many of each other tenant's messages, its own tenant's, the
system's level-0 messages (the sweep) and what workers already took (prefetch), however
long the other tenants' queues are. Messages without a counted owner (a provider without
``[rate_limit]``, a lease-busy retry) are published at level 0 as before.

Pure: the count is kept in Redis by ``tasks/provider/wakeup_backlog.py``.
"""

from __future__ import annotations

import math
from typing import Final

from jobwarden.models.provider.fair_shares import DEFAULT_PRIORITY

# kombu's Redis transport keeps one list per priority step; ten steps (0 to 9) is its
# widest range (priorities are clamped to 0..9). 512 waiting wake-ups per unit of weight
# already reach the last level.
LEVELS: Final = 10


def level(waiting: int, *, weight: int = 1, priority: int = DEFAULT_PRIORITY) -> int:
    """The broker priority level (0 first) of a wake-up that is its tenant's ``waiting``-th
    (this one included) at the provider, for a tenant of ``weight`` and an operation of
    ``priority``. A count below 1 (a counter that lost track) counts as 1."""
    per_weight = math.ceil(max(1, waiting) / max(1, weight))
    base = per_weight.bit_length() - 1  # floor(log2(per_weight)), exact for any int
    shift = -1 if priority > DEFAULT_PRIORITY else 1 if priority < DEFAULT_PRIORITY else 0
    return min(LEVELS - 1, max(0, base + shift))


def most_waiting_at_or_below(at_level: int, *, weight: int = 1) -> int:
    """The bound: at any moment a tenant of ``weight`` has at most this many wake-ups
    waiting at ``at_level`` or below (whatever its operations' priorities)."""
    if at_level >= LEVELS - 1:
        raise ValueError("the last level holds any number of wake-ups")
    return weight * ((1 << (at_level + 2)) - 1)
