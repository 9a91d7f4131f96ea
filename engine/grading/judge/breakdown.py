"""Where a call's time goes, as the runners report it: host, device and end to end.

Per timed call a runner reports ``ms`` (CUDA events from before ``solve`` to after the device
sync, or ``perf_counter`` on the CPU preview) and ``host_ms`` (``perf_counter`` from the call
until ``solve`` returns, before the sync: what launching costs the host). After its timed
calls, each runner profiles the last inputs (``profile`` with ``span_calls`` → ``device_ms``:
the GPU time of one call from the profiler's device events, and ``spans_ms``: per profiled
call, first device start to last device end, the call's *GPU span*; ``None`` without a GPU).
Spans are taken after the timed calls, never on them: CUPTI, once attached, slows every later
launch (docs/analysis.md, "A second time: the GPU span").

The submission's runner is the adversary's process, so these figures are informational
only: never part of the score or the verdict. Each one is kept only when it is a finite
number in ``[0, MAX_MS]``; anything else is counted as ignored. The summary lands in the
feedback as ``clock.breakdown`` with ``source: runner``; a span must also be above zero, and
at most :data:`MAX_SPAN_CALLS` are read.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from engine.grading.judge.timing import summarize
from engine.grading.runner.dsl_hooks import MAX_SPAN_CALLS

MAX_MS = 3_600_000.0  # an hour: no call under the grader's limits runs longer
SIDES = ("submission", "eager")
NOTE = "the runners' own figures: informational, never part of the score or the verdict"


def sane_ms(value: Any) -> float | None:
    """``value`` as milliseconds when it is a finite number in ``[0, MAX_MS]``, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value <= MAX_MS else None


class CallBreakdown:
    """Collects the runners' per-call figures for both sides and writes their medians into
    ``result["breakdown"]`` (the judge's result dictionary) each time a side settles."""

    def __init__(self, result: dict[str, Any]) -> None:
        self.result = result
        self.host: dict[str, list[float]] = {side: [] for side in SIDES}
        self.e2e: dict[str, list[float]] = {side: [] for side in SIDES}
        self.device: dict[str, float | None] = {side: None for side in SIDES}
        self.spans: dict[str, list[float]] = {side: [] for side in SIDES}
        self.ignored: dict[str, int] = {side: 0 for side in SIDES}
        self.timed: dict[str, int] = {side: 0 for side in SIDES}

    def add(self, side: str, reply: dict[str, Any]) -> None:
        """One timed call's ``done`` reply."""
        self.timed[side] += 1
        for samples, key in ((self.host, "host_ms"), (self.e2e, "ms")):
            ms = sane_ms(reply.get(key))
            if ms is None:
                self.ignored[side] += 1
            else:
                samples[side].append(ms)

    def settle(self, side: str, runner: Any, deadline: float, cuda: bool) -> int | None:
        """Profile one side's last inputs (GPU only) and write the summary. Returns the
        runner's native thread count after the profiler ran (its threads are ours), if any.

        Junk in the answer is ignored; a runner that dies or overruns the deadline raises
        as in any other request (the same outcome its next request would have)."""
        threads = None
        if cuda:
            message = {"op": "profile", "span_calls": self.span_calls(side)}
            reply, _ = runner.request(message, deadline)
            if isinstance(reply, dict) and reply.get("op") == "profiled":
                device = sane_ms(reply.get("device_ms"))
                self.device[side] = None if device is None else round(device, 6)
                if device is None and reply.get("device_ms") is not None:
                    self.ignored[side] += 1
                self.add_spans(side, reply.get("spans_ms"))
                if type(reply.get("threads")) is int:
                    threads = reply["threads"]
            else:
                self.ignored[side] += 1
        self.result["breakdown"] = self.summary()
        return threads

    def span_calls(self, side: str) -> int:
        """Profiled calls to ask for: one per timed call of the side, at most
        :data:`MAX_SPAN_CALLS`."""
        return min(max(self.timed[side], 1), MAX_SPAN_CALLS)

    def add_spans(self, side: str, spans: Any) -> None:
        """The spans of a ``profiled`` reply: each kept when it is a time above zero, the
        rest (and any beyond :data:`MAX_SPAN_CALLS`) counted as ignored; ``None``: none."""
        if spans is None:
            return
        if not isinstance(spans, list):
            self.ignored[side] += 1
            return
        self.ignored[side] += max(len(spans) - MAX_SPAN_CALLS, 0)
        for value in spans[:MAX_SPAN_CALLS]:
            ms = sane_ms(value)
            if ms is None or ms <= 0.0:
                self.ignored[side] += 1
            else:
                self.spans[side].append(ms)

    def summary(self) -> dict[str, Any]:
        """Medians per side (``None`` where no sane figure came back)."""
        out: dict[str, Any] = {"source": "runner", "note": NOTE}
        for side in SIDES:
            host, e2e = self.host[side], self.e2e[side]
            if not (host or e2e or self.ignored[side] or self.device[side] is not None):
                continue  # this side has not run
            spans = self.spans[side]
            span, span_iqr = summarize(spans) if spans else (None, None)
            out[side] = {
                "host_ms": _median(host),
                "device_ms": self.device[side],
                "e2e_ms": _median(e2e),
                "span_ms": _round(span),
                "span_iqr_ms": _round(span_iqr),
                "span_calls": len(spans),
                "calls": max(len(host), len(e2e)),
                "ignored": self.ignored[side],
            }
        return out


def _median(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 6) if samples else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
