"""Repeated finals: each finished attempt's final implementation graded ``[grading]
final_repeats`` times in all, each a separate grading job in a fresh runner, spread in time.

Repeat 1 is the attempt's final evaluation itself (recorded as the first row of its series when
the outcome is stored); repeats 2..R are queued here and graded through the engine's grading
gate (as final evaluations: after every waiting feedback grading). The order interleaves them
with other work:

- repeat k of an attempt is graded after repeat k of every attempt queued before it (the queue
  is ordered by repeat number, then by when the attempt finished);
- a repeat never follows a grading of the same file directly while other work exists (an
  attempt still running, or another repeat in flight): it waits for some other grading to end.
  With nothing else left (the last attempts of a run) the remaining repeats run one after
  another, each still in a fresh runner — there is nothing to interleave them with.

Each repeat is one ``timing_repeats`` row (``storage/repeats.py``), unique per series
(``final:<attempt>:<try>``) and repeat, opened before the grading and closed with its feedback;
the attempt's runtime becomes the median of its passing repeats in the same transaction, and
its comparisons are recomputed. A resumed run queues only the repeats not stored ``done``, so
``kill -9`` never makes a stored repeat be graded again nor loses one. Only passing finals are
repeated: a failing final has no runtime to refine, and its verdict is the first final's.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import itertools
import json
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine import comparisons
from engine.analysis.spans import span_of
from engine.events import FinalRepeatGraded, Publisher
from engine.grading.admission import runtime_defect
from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.grading.backends.gate import GradingGate
from engine.grading.machine import machine_name
from engine.plan import Plan
from engine.retry import RetryPolicy
from storage import repeats as repeat_rows
from storage import writes
from storage.event_rows import text_hash

LOCAL_BACKENDS = ("local", "simulated")  # graded on this machine


def grading_host(backend_name: str, device: str, reported: str = "") -> str:
    """The grading host of a feedback, with the device it reported: the machine the grader
    named (``Feedback.host`` less its slot, through any backend), else this machine (local
    grading) or the backend's name (a pool of hosts the feedback does not tell apart)."""
    machine = reported.split(":")[0]  # a machine's GPUs share one band (its CPU's noise)
    where = machine or (_this_host() if backend_name in LOCAL_BACKENDS else backend_name)
    return f"{where} · {device}" if device else where


@functools.cache
def _this_host() -> str:
    return machine_name()


async def until_either(work: Awaitable[Any], stop: asyncio.Event) -> None:
    """Wait until ``work`` ends or ``stop`` is set, whichever comes first; cancel the other."""
    done = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({done, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        done.cancel()
        stopped.cancel()


async def cancel_all(workers: list[asyncio.Task[None]]) -> None:
    """Cancel background workers and wait until every one has ended."""
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)


class GradingTicker:
    """A grading backend that counts finished gradings and remembers the last file graded,
    so a repeat can wait for other work to come between it and the same file."""

    def __init__(self, inner: GradingBackend) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "grading")
        self.finished = 0
        self.last_source_hash = ""
        self._tick = asyncio.Event()

    async def grade(self, request: GradeRequest) -> Feedback:
        try:
            return await self.inner.grade(request)
        finally:
            self.finished += 1
            self.last_source_hash = text_hash(request.source)
            self._tick.set()
            self._tick = asyncio.Event()

    async def next_tick(self, timeout_s: float) -> None:
        """Wait until another grading finishes (or ``timeout_s`` passes)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tick.wait(), timeout_s)

    async def close(self) -> None:
        await self.inner.close()


@dataclass(order=True)
class _Repeat:
    repeat: int
    seq: int
    attempt_id: int = field(compare=False)
    series: str = field(compare=False)
    request: GradeRequest = field(compare=False)
    source_hash: str = field(compare=False)


def final_of(db: Any, attempt_id: int, try_number: int) -> tuple[str, dict[str, Any]] | None:
    """The graded final evaluation (source, feedback) of an attempt's try."""
    row = db.execute(
        "SELECT source, feedback_json FROM submissions WHERE attempt_id=? AND try=? AND "
        "purpose='final' AND state='done' AND feedback_json IS NOT NULL ORDER BY n DESC LIMIT 1",
        [attempt_id, try_number],
    ).fetchone()
    if row is None:
        return None
    return str(row[0]), json.loads(row[1])


def refresh_runtime(db: Any, attempt_id: int, series: str) -> None:
    """The attempt's runtime, eager time and speedup: medians over its passing repeats whose
    runtime is a finite positive number (others, stored before timings were checked where
    they enter, are left out; the analysis counts them under ``timing.invalid``)."""
    rows = [
        r
        for r in repeat_rows.series_rows(db, series)
        if r.passed and runtime_defect(r.impl_median_ms) is None
    ]
    if not rows:
        return

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None and runtime_defect(v) is None]
        return statistics.median(known) if known else None

    writes.update_attempt(
        db,
        attempt_id,
        impl_median_ms=median([r.impl_median_ms for r in rows]),
        eager_median_ms=median([r.eager_median_ms for r in rows]),
        speedup=median([r.speedup for r in rows]),
    )


def _record_final(
    db: Any, attempt_id: int, experiment_id: str, backend_name: str
) -> tuple[str, str, str, str, set[int]] | None:
    """An attempt's passing final as repeat 1 of its series (once): its problem, DSL, source,
    series and the repeats already graded; None when it has no passing final."""
    attempt = db.execute(
        "SELECT problem_id, dsl, tries, outcome FROM attempts WHERE id=?", [attempt_id]
    ).fetchone()
    if attempt is None or attempt[3] not in repeat_rows.PASSING:
        return None
    problem_id, dsl, try_number, _ = attempt
    final = final_of(db, attempt_id, try_number)
    if final is None:
        return None
    source, feedback = final
    series = repeat_rows.final_series(attempt_id, try_number)
    host = grading_host(
        backend_name, str(feedback.get("device") or ""), str(feedback.get("host") or "")
    )
    repeat_rows.record_repeat(
        db,
        series,
        1,
        feedback,
        kind="final",
        problem_id=problem_id,
        dsl=dsl,
        source=source,
        host=host,
        experiment_id=experiment_id,
        attempt_id=attempt_id,
        span_ms=span_of(feedback, "submission"),
    )
    return problem_id, dsl, source, series, repeat_rows.done_repeats(db, series)


def _finish_and_refresh(
    db: Any, series: str, repeat: int, feedback: dict[str, Any], host: str, attempt_id: int
) -> bool:
    span = span_of(feedback, "submission")
    stored = repeat_rows.finish_repeat(db, series, repeat, feedback, host=host, span_ms=span)
    if stored:
        refresh_runtime(db, attempt_id, series)
    return stored


class FinalRepeats:
    """The queue and workers of one engine's repeated finals (see the module docstring)."""

    def __init__(
        self,
        *,
        publisher: Publisher,
        backend: GradingBackend,
        gate: GradingGate,
        retry: RetryPolicy,
        experiment_id: str,
        repeats: int,
        plan: Plan,
        ids: Callable[[], dict[str, int]],
    ) -> None:
        self.publisher = publisher
        self.store = publisher.store
        self.backend = self.ticker = GradingTicker(backend)
        self.gate = gate
        self.retry = retry
        self.experiment_id = experiment_id
        self.repeats = repeats
        self.plan = plan
        self.ids = ids
        self.busy: Callable[[], bool] = lambda: False
        self.graded = 0
        self._queue: list[_Repeat] = []
        self._seq = itertools.count()
        self._in_flight: set[str] = set()  # series with a repeat being graded
        self._changed = asyncio.Event()
        self._keys: dict[int, str] = {}  # plan key by attempt id

    @property
    def pending(self) -> int:
        return len(self._queue) + len(self._in_flight)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def add(self, attempt_id: int) -> None:
        """Record an attempt's passing final as repeat 1 and queue its missing repeats."""
        found = await self.store.write(
            _record_final, attempt_id, self.experiment_id, self.backend.name
        )
        if found is None:
            return
        problem_id, dsl, source, series, done = found
        for k in range(2, self.repeats + 1):
            if k in done:
                continue
            request = GradeRequest(
                problem_id, dsl, source, request_id=f"{attempt_id}-final-r{k}", purpose="final"
            )
            item = _Repeat(k, next(self._seq), attempt_id, series, request, text_hash(source))
            bisect.insort(self._queue, item)  # kept in order: repeat number, then arrival
        self._wake()

    def _pick(self) -> _Repeat | None:
        """The first queued repeat that may start now (see the module docstring)."""
        others = (
            self.busy()
            or bool(self._in_flight)
            or any(q.source_hash != self.backend.last_source_hash for q in self._queue)
        )
        for i, item in enumerate(self._queue):
            if item.series in self._in_flight:
                continue
            if others and item.source_hash == self.backend.last_source_hash:
                continue
            return self._queue.pop(i)
        return None

    async def worker(self) -> None:
        """Grade queued repeats until cancelled."""
        while True:
            item = self._pick()
            if item is None:
                changed = self._changed
                waits = [
                    asyncio.ensure_future(changed.wait()),
                    asyncio.ensure_future(self.backend.next_tick(0.5)),
                ]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
                continue
            self._in_flight.add(item.series)
            try:
                await self._grade(item)
            finally:
                self._in_flight.discard(item.series)
                self._wake()

    async def _grade(self, item: _Repeat) -> None:
        start = {
            "kind": "final",
            "problem_id": item.request.problem_id,
            "dsl": item.request.dsl,
            "source": item.request.source,
            "experiment_id": self.experiment_id,
            "attempt_id": item.attempt_id,
        }
        opened = await self.store.write(repeat_rows.start_repeat, item.series, item.repeat, **start)
        if not opened:
            return  # graded already (a resumed run found it done)
        feedback = await self.retry.grade(GatedFinal(self.backend, self.gate), item.request)
        host = grading_host(self.backend.name, feedback.device, feedback.host)
        stored = await self.publisher.publish(
            FinalRepeatGraded(
                self.experiment_id,
                item.attempt_id,
                repeat=item.repeat,
                verdict=feedback.verdict,
                runtime_ms=feedback.impl_median_ms,
            ),
            _finish_and_refresh,
            item.series,
            item.repeat,
            feedback.to_dict(),
            host,
            item.attempt_id,
        )
        if stored and feedback.verdict != "error":
            self.graded += 1
        if not any(q.series == item.series for q in self._queue):  # its last repeat
            await self._recompute(item.attempt_id)

    async def _recompute(self, attempt_id: int) -> None:
        """The comparisons an attempt takes part in, with its new runtime."""
        ids = self.ids()
        if len(self._keys) != len(ids):
            self._keys = {v: k for k, v in ids.items()}
        key = self._keys.get(attempt_id)
        for spec in self.plan.comparisons_touching(key) if key is not None else ():
            await comparisons.update(self.publisher, self.experiment_id, spec, ids)

    async def run_with(
        self, schedule: Awaitable[None], busy: Callable[[], bool], stop: asyncio.Event
    ) -> None:
        """Run the scheduling loop with the repeat workers beside it: first queue what a
        previous run left ungraded, then, when the loop ends, grade what is left (unless
        stopped). Workers are cancelled on the way out; an interrupted repeat stays
        ``running`` in the store and is graded again by the next run."""
        self.busy = busy
        workers = [
            asyncio.create_task(self.worker(), name=f"final-repeat-{i}")
            for i in range(self.gate.slots if self.repeats > 1 else 0)
        ]
        try:
            missing = await self.store.read(
                repeat_rows.attempts_missing, self.experiment_id, self.repeats
            )
            for attempt_id in missing:
                await self.add(attempt_id)
            await schedule
            await until_either(self.drain(), stop)
        finally:
            await cancel_all(workers)

    async def drain(self) -> None:
        """Wait until every queued repeat is graded (or failed for infrastructure)."""
        while self._queue or self._in_flight:
            await self._changed.wait()


class GatedFinal:
    """One try of a repeat holds one slot of the engine's grading gate (as a final)."""

    def __init__(self, inner: GradingBackend, gate: GradingGate) -> None:
        self.inner = inner
        self.gate = gate
        self.name = getattr(inner, "name", "grading")

    async def grade(self, request: GradeRequest) -> Feedback:
        async with self.gate.slot("final"):
            return await self.inner.grade(request)

    async def close(self) -> None:
        return None
