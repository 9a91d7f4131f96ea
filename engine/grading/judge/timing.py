"""Timing primitives, bound when this module is imported (before any submission is).

CUDA: ``sync → start event → call → device sync → end event``; CPU preview: ``perf_counter``
around the call. Both return milliseconds; :func:`summarize` gives the median and the IQR.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

_perf_counter = time.perf_counter

SPEEDUP_CAP = 100.0


class CpuTimer:
    """Wall time of one call with ``time.perf_counter`` (bound at import)."""

    kind = "perf_counter"

    def __init__(self) -> None:
        self._clock = _perf_counter

    def time_call(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, float]:
        clock = self._clock
        start = clock()
        out = fn(*args)
        end = clock()
        return out, (end - start) * 1e3


class CudaTimer:
    """End-to-end time of one call with CUDA events and device synchronisation."""

    kind = "cuda_events"

    def __init__(self) -> None:
        import torch

        self._event = torch.cuda.Event
        self._sync = torch.cuda.synchronize
        self._record = torch.cuda.Event.record
        self._elapsed = torch.cuda.Event.elapsed_time
        self._event_sync = torch.cuda.Event.synchronize

    def time_call(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, float]:
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        self._sync()
        self._record(start)
        out = fn(*args)
        self._sync()
        self._record(end)
        self._event_sync(end)
        return out, float(self._elapsed(start, end))

    def bound(self) -> dict[str, Any]:
        """The primitives as bound, to detect later replacement."""
        return {
            "Event": self._event,
            "synchronize": self._sync,
            "Event.record": self._record,
            "Event.elapsed_time": self._elapsed,
            "Event.synchronize": self._event_sync,
        }


def summarize(samples_ms: Sequence[float]) -> tuple[float, float]:
    """(median, interquartile range) of a list of times in milliseconds."""
    if not samples_ms:
        raise ValueError("no samples")
    if len(samples_ms) < 4:
        return float(statistics.median(samples_ms)), 0.0
    q1, _, q3 = statistics.quantiles(samples_ms, n=4, method="inclusive")
    return float(statistics.median(samples_ms)), float(q3 - q1)


def speedup(eager_median_ms: float, impl_median_ms: float) -> float:
    """Eager median over implementation median, capped at :data:`SPEEDUP_CAP`."""
    if impl_median_ms <= 0:
        return SPEEDUP_CAP
    return min(SPEEDUP_CAP, eager_median_ms / impl_median_ms)
