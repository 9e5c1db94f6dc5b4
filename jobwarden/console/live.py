"""Live operation pages: one shared poller per operation per process, fanned out.

However many operators watch an operation, this process reads its row at most
once per ``interval`` (default 1 s): the first viewer starts a poller task, the
last one to leave stops it. Each viewer gets only the newest change (a queue of
one), so a slow browser never makes the poller wait or buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Marker:
    """What a viewer needs to know changed: the row's version and its state."""

    version: int
    state: str


Read = Callable[[uuid.UUID], Awaitable[Marker | None]]


@dataclass
class _Watch:
    viewers: set[asyncio.Queue[Marker | None]] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    last: Marker | None = None


class LiveHub:
    """Fans one poller's changes out to every viewer of an operation (in one event loop)."""

    def __init__(self, read: Read, *, interval: float = 1.0) -> None:
        self._read = read
        self._interval = interval
        self._watches: dict[uuid.UUID, _Watch] = {}
        self.reads = 0  # rows read since start: the bound the tests hold

    def pollers(self) -> int:
        return sum(1 for w in self._watches.values() if w.task is not None)

    async def _poll(self, op_id: uuid.UUID, watch: _Watch) -> None:
        while watch.viewers:
            self.reads += 1
            marker = await self._read(op_id)
            if marker != watch.last:
                watch.last = marker
                for queue in watch.viewers:
                    _offer(queue, marker)
            await asyncio.sleep(self._interval)

    @contextlib.asynccontextmanager
    async def watch(self, op_id: uuid.UUID) -> AsyncIterator[asyncio.Queue[Marker | None]]:
        """A queue receiving the operation's newest marker whenever it changes (None: the
        operation is gone). The first marker a new viewer gets is the current one."""
        watch = self._watches.setdefault(op_id, _Watch())
        queue: asyncio.Queue[Marker | None] = asyncio.Queue(maxsize=1)
        watch.viewers.add(queue)
        if watch.last is not None:
            _offer(queue, watch.last)
        if watch.task is None:
            watch.task = asyncio.create_task(self._poll(op_id, watch))
        try:
            yield queue
        finally:
            watch.viewers.discard(queue)
            if not watch.viewers:
                task, watch.task = watch.task, None
                self._watches.pop(op_id, None)
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task


def _offer(queue: asyncio.Queue[Marker | None], marker: Marker | None) -> None:
    # Only the newest change matters to a page that re-renders itself: drop the stale one.
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(marker)
