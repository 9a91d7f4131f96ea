"""The engine's grading slots: at most ``[concurrency].grading_slots`` evaluations in flight,
and a waiting feedback grading always goes before a waiting final evaluation.

An agent waits for feedback with its budget running; nobody waits for a final evaluation.
Serving feedback first keeps feedback latency bounded by the slots' own service time even
when many attempts end at once and their final evaluations pile up. Within one class the
order is first come, first served.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

PRIORITY = {"submission": 0, "final": 1}


class GradingGate:
    """Priority slots for gradings (usable from one event loop)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("grading slots must be at least 1")
        self.slots = slots
        self.in_flight = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        """Gradings waiting for a slot (the engine's grading queue depth)."""
        return sum(1 for _, _, fut in self._waiters if not fut.done())

    @asynccontextmanager
    async def slot(self, purpose: str) -> AsyncIterator[None]:
        """Hold one slot for the block; waits, by priority, while all slots are busy."""
        await self._acquire(PRIORITY.get(purpose, 0))
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int) -> None:
        if self.in_flight < self.slots and self.waiting == 0:
            self.in_flight += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release()  # the slot was handed over just as we were cancelled
            raise

    def _release(self) -> None:
        """Hand the slot to the most urgent waiter, or free it."""
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)  # the slot passes on; in_flight is unchanged
                return
        self.in_flight -= 1
