"""Labelled grading slots handed out first come, first served; a request may name its slot.

A paired job (``engine/paired_repeats.py``) grades a comparison's two finals on one slot: its
requests carry ``GradeRequest.slot`` (the ``Feedback.host`` of its first grading,
``machine:label``, :mod:`engine.grading.machine`) and wait for that slot while other requests
take any free one. A name this pool does not hold (another machine's slot, a slot gone) is
served by any slot: the feedback names where it ran, so nothing is mixed silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from engine.grading.machine import machine_name


def wanted_label(slot: str, hostname: str | None = None) -> str:
    """The slot label a request names on this machine (``machine:label``), else ""."""
    machine, _, label = slot.partition(":")
    return label if label and machine == (hostname or machine_name()) else ""


class SlotPool[T]:
    """Slots (anything with a label) for one event loop: ``acquire`` one, ``release`` it."""

    def __init__(self, slots: list[T], label: Callable[[T], str]) -> None:
        self.slots = list(slots)
        self.label = label
        self._free = list(slots)
        self._waiters: list[tuple[str, asyncio.Future[T]]] = []

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def waiting(self) -> int:
        return sum(1 for _, fut in self._waiters if not fut.done())

    def _fits(self, wanted: str, slot: T) -> bool:
        return not wanted or self.label(slot) == wanted

    async def acquire(self, wanted: str = "") -> T:
        """A free slot (the one labelled ``wanted`` when this pool holds it), waiting in
        arrival order behind earlier requests that could take the same slot."""
        if wanted and all(self.label(s) != wanted for s in self.slots):
            wanted = ""
        for slot in self._free:
            ahead = any(self._fits(w, slot) for w, f in self._waiters if not f.done())
            if self._fits(wanted, slot) and not ahead:
                self._free.remove(slot)
                return slot
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiters.append((wanted, fut))
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())  # handed over just as we were cancelled
            raise
        finally:
            self._waiters = [(w, f) for w, f in self._waiters if f is not fut]

    def release(self, slot: T) -> None:
        """Hand ``slot`` to the first waiter it suits, or free it."""
        for wanted, fut in self._waiters:
            if not fut.done() and self._fits(wanted, slot):
                fut.set_result(slot)
                return
        self._free.append(slot)
