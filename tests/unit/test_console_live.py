"""The console's live hub: one poller per operation however many viewers, at a bounded rate."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack

from jobwarden.console.live import LiveHub, Marker


def test_many_viewers_of_one_operation_share_one_poller_and_all_see_each_change() -> None:
    async def scenario() -> None:
        op = uuid.uuid4()
        version = {"v": 1}
        reads: list[uuid.UUID] = []

        async def read(op_id: uuid.UUID) -> Marker | None:
            reads.append(op_id)
            return Marker(version=version["v"], state="observing")

        hub = LiveHub(read, interval=0.01)
        async with AsyncExitStack() as stack:
            queues = [await stack.enter_async_context(hub.watch(op)) for _ in range(50)]
            assert hub.pollers() == 1
            firsts = await asyncio.wait_for(asyncio.gather(*(q.get() for q in queues)), 5)
            assert {m.version for m in firsts if m} == {1}
            version["v"] = 2
            seconds = await asyncio.wait_for(asyncio.gather(*(q.get() for q in queues)), 5)
            assert {m.version for m in seconds if m} == {2}
            # One read per interval for all fifty viewers, not one per viewer.
            assert len(reads) < 50
        assert hub.pollers() == 0

    asyncio.run(scenario())


def test_the_poller_reads_at_most_once_per_interval() -> None:
    async def scenario() -> None:
        reads = 0

        async def read(op_id: uuid.UUID) -> Marker | None:
            nonlocal reads
            reads += 1
            return Marker(version=1, state="observing")

        hub = LiveHub(read, interval=0.05)
        loop = asyncio.get_running_loop()
        async with hub.watch(uuid.uuid4()), hub.watch(uuid.uuid4()) as second:
            started = loop.time()
            await second.get()
            await asyncio.sleep(0.3)  # the span measured, not a synchronisation
            elapsed = loop.time() - started
        # Two operations, each polled at most once per 0.05 s (plus the first read).
        assert reads <= 2 * (elapsed / 0.05 + 1)

    asyncio.run(scenario())


def test_a_slow_viewer_only_keeps_the_newest_change() -> None:
    async def scenario() -> None:
        version = {"v": 1}
        seen = asyncio.Event()

        async def read(op_id: uuid.UUID) -> Marker | None:
            if version["v"] >= 3:
                seen.set()
            return Marker(version=version["v"], state="observing")

        hub = LiveHub(read, interval=0.01)
        async with hub.watch(uuid.uuid4()) as queue:
            while queue.empty():
                await asyncio.sleep(0.01)
            version["v"] = 3
            await asyncio.wait_for(seen.wait(), 5)
            await asyncio.sleep(0.05)
            assert queue.qsize() == 1
            newest = queue.get_nowait()
            assert newest is not None and newest.version == 3

    asyncio.run(scenario())
