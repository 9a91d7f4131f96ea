"""Paired finals: a comparison as the unit of final grading (``[grading] paired_repeats``).

Once a comparison is resolved with both arms passing, one *paired job* grades its baseline's
and its treatment's final files ``k`` times each, interleaved in pairs (each pair one grading
of each arm, in an order drawn at random per pair: :func:`arm_at`), each a fresh grading, all
on ONE grading slot, so host speed and drift cancel within a pair. The first grading goes to
any free slot; every later one names that slot (``GradeRequest.slot`` = the first feedback's
``host``) and each backend places it there (local and simulated slots, an http service's
slot, a Ray lane). Each grading holds one slot of the engine's grading gate as a final
evaluation, behind waiting feedback.

Each grading is one ``timing_repeats`` row (``storage/repeats.py``, migration m008): series
``pair:<experiment>:<comparison id>:<arm>``, ``repeat`` = its position in the job's order, the
shared ``pair_key``, and the ``slot`` that graded it; opened before the grading and closed with
its feedback. A resumed run skips the positions stored ``done`` and continues the same order
on the slot of the last stored row, so ``kill -9`` grades no stored row again and loses none.

A grading that ends in an infrastructure error (its slot died: a lost service, a dead Ray
lane) is tried again from the same position with no slot named: the rest of the job runs on
whichever slot answers, and the rows say so: a pair spanning two slots (or two machines, a
job resumed elsewhere: slots carry the machine's boot id, :mod:`engine.grading.machine`) is
left out of the analysis's test and counted, never silent. ``"adaptive"`` stops after any
complete pair where the sequential test (``engine.analysis.sequential.decide``) says other
than ``"continue"``, or at ``paired_max`` pairs. Paired rows never change an attempt's
runtime: solo metrics keep each attempt's own finals.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from engine.analysis import sequential
from engine.analysis.noise import Series, pool
from engine.analysis.spans import span_of
from engine.events import PairedFinalGraded, Publisher
from engine.final_repeats import GatedFinal, cancel_all, final_of, grading_host, until_either
from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.grading.backends.gate import GradingGate
from engine.retry import RetryPolicy
from storage import queries
from storage import repeats as repeat_rows

MOVES = 3  # slots a job may move to after infrastructure errors before it is left to a rerun
Decide = Callable[..., str]  # (diffs, band σ, band dof, max pairs, *, provisional) -> decision


def arm_at(position: int, key: str) -> str:
    """The arm graded at 1-based ``position`` of the paired job ``key``: pair ``j`` holds
    positions ``2j-1`` and ``2j``, one of each arm, its order a fair coin drawn from a hash
    of the job's key and ``j`` (the same on every resume). A fixed order (A B B A …) would
    be confounded with any effect of the grader that repeats with the order's period; a
    random order makes such an effect noise the pair's test sees (docs/analysis.md)."""
    pair = (position + 1) // 2
    coin = hashlib.sha256(f"{key}:{pair}".encode()).digest()[0] & 1
    first = ("baseline", "treatment")[coin]
    return first if position % 2 == 1 else ("treatment" if first == "baseline" else "baseline")


def arm_of(position: int, key: str, stored: dict[int, str | None]) -> str:
    """The arm to grade at ``position``: the other arm than its pair's stored first grading
    (a job begun in another order, A B B A … before the random order, stays in pairs), else
    :func:`arm_at`."""
    partner = stored.get(position - 1) if position % 2 == 0 else None
    if partner in ("baseline", "treatment"):
        return "treatment" if partner == "baseline" else "baseline"
    return arm_at(position, key)


def _log_runtime(row: repeat_rows.RepeatRow) -> float | None:
    value = row.impl_median_ms
    ok = row.passed and value is not None and math.isfinite(value) and value > 0
    return math.log(value) if ok and value is not None else None


def pair_diffs(rows: list[repeat_rows.RepeatRow]) -> list[float]:
    """log(baseline / treatment) of each complete pair both of whose gradings passed with a
    finite positive runtime (the i-th baseline row against the i-th treatment row)."""
    arms: dict[str, list[repeat_rows.RepeatRow]] = {"baseline": [], "treatment": []}
    for row in sorted(rows, key=lambda r: r.repeat):
        if row.arm in arms and row.state == "done":
            arms[row.arm].append(row)
    diffs = []
    for base, treat in zip(arms["baseline"], arms["treatment"], strict=False):
        b, t = _log_runtime(base), _log_runtime(treat)
        if b is not None and t is not None:
            diffs.append(b - t)
    return diffs


@dataclass(frozen=True)
class PairJob:
    """One comparison's paired job: its key and each arm's attempt and final file."""

    comparison_id: int
    key: str
    problem_id: str
    arms: dict[str, tuple[int, str, str]]  # arm -> (attempt id, dsl, source)


def _job_of(db: Any, experiment_id: str, comparison_id: int) -> PairJob | None:
    """The paired job of a resolved comparison whose two arms passed (else None)."""
    comp = queries.comparison(db, comparison_id)
    if comp is None or not comp.resolved or comp.skipped:
        return None
    arms: dict[str, tuple[int, str, str]] = {}
    for arm, attempt_id in (
        ("baseline", comp.baseline_attempt_id),
        ("treatment", comp.treatment_attempt_id),
    ):
        row = queries.attempt(db, attempt_id) if attempt_id else None
        if row is None or row.state != "finished" or row.outcome not in repeat_rows.PASSING:
            return None
        final = final_of(db, row.id, row.tries)
        if final is None:
            return None
        arms[arm] = (row.id, row.dsl, final[0])
    key = repeat_rows.pair_key(experiment_id, comparison_id)
    return PairJob(comparison_id, key, comp.problem_id, arms)


def _series(db: Any, experiment_id: str, problem_id: str) -> list[Series]:
    rows = repeat_rows.problem_series(db, [problem_id], experiment_id=experiment_id)
    return [
        Series(r["problem"], r["host"], tuple(r["values"]), r["key"], r["dsl"], r["preview"])
        for r in rows
    ]


def _band(bands: dict[Any, Any], key: tuple[str, str, str]) -> sequential.Band:
    band = bands.get(key)
    return (band.sigma, band.dof) if band is not None and band.sigma is not None else (None, 0)


def decision_bands(
    db: Any, experiment_id: str, job: PairJob, host: str
) -> tuple[sequential.Band, sequential.Band]:
    """The bands the sequential rule reads on ``host``: both arms' bands of (problem, DSL,
    host), this job's own rows left out (:func:`sequential.arms_band`), and the provisional
    band of its futility stop: each arm's problem and DSL pooled over every host, this job's
    own arms included (each arm is a series of one file on one slot). The provisional band
    never enters a test (docs/analysis.md, "Adaptive repeats")."""
    every = _series(db, experiment_id, job.problem_id)
    mine = f"{job.key}:"
    leave_out = pool(s for s in every if not s.key.startswith(mine))
    anywhere = pool(Series(s.problem, "*", s.values_ms, s.key, s.dsl, s.preview) for s in every)
    dsls = [job.arms[arm][1] for arm in ("baseline", "treatment")]
    strict = [_band(leave_out, (job.problem_id, dsl, host)) for dsl in dsls]
    loose = [_band(anywhere, (job.problem_id, dsl, "*")) for dsl in dsls]
    return sequential.arms_band(*strict), sequential.arms_band(*loose)


def _resolved_ids(db: Any, experiment_id: str) -> list[int]:
    return [c.id for c in queries.comparisons(db, experiment_id, resolved_only=True)]


def _finish(
    db: Any, series: str, position: int, feedback: dict[str, Any], host: str, span: float | None
) -> bool:
    return repeat_rows.finish_repeat(db, series, position, feedback, host=host, span_ms=span)


class PairedRepeats:
    """The queue and workers of one engine's paired jobs (see the module docstring)."""

    def __init__(
        self,
        *,
        publisher: Publisher,
        backend: GradingBackend,
        gate: GradingGate,
        retry: RetryPolicy,
        experiment_id: str,
        pairs: int,
        adaptive: bool = False,
        decide: Decide | None = None,
    ) -> None:
        self.publisher = publisher
        self.store = publisher.store
        self.backend = backend
        self.gate = gate
        self.retry = retry
        self.experiment_id = experiment_id
        self.pairs = pairs
        self.adaptive = adaptive
        self.decide = decide
        self.graded = 0
        self._seen: set[int] = set()
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def add_resolved(self) -> None:
        """Queue every resolved comparison not queued yet (its job decides if it has work)."""
        if self.pairs <= 0:
            return
        for comparison_id in await self.store.read(_resolved_ids, self.experiment_id):
            if comparison_id not in self._seen:
                self._seen.add(comparison_id)
                self._idle.clear()
                self._queue.put_nowait(comparison_id)

    async def worker(self) -> None:
        """Run queued jobs until cancelled."""
        while True:
            comparison_id = await self._queue.get()
            self._active += 1
            try:
                job = await self.store.read(_job_of, self.experiment_id, comparison_id)
                if job is not None:
                    await self.run_job(job)
            finally:
                self._active -= 1
                if self._active == 0 and self._queue.empty():
                    self._idle.set()

    async def run_job(self, job: PairJob) -> None:
        """Grade a job's missing positions in order, on one slot (see the module docstring)."""
        done = await self.store.read(repeat_rows.pair_done, job.key)
        slot = done[-1].slot if done else ""
        stored = {r.repeat for r in done}
        moves = 0
        position = 1
        while position <= 2 * self.pairs:
            if position % 2 == 1 and await self._decided(job, done):
                return
            if position in stored:
                position += 1
                continue
            arm = arm_of(position, job.key, {r.repeat: r.arm for r in done})
            feedback = await self._grade(job, position, arm, slot)
            if feedback is None:  # stored already by another run: read what it left
                done = await self.store.read(repeat_rows.pair_done, job.key)
                stored = {r.repeat for r in done}
                continue
            if feedback.verdict == "error":
                moves += 1
                if moves > MOVES:
                    return  # left to a rerun (the row stays open: graded again then)
                slot = ""  # its slot died: the rest of the job goes wherever answers
                continue
            slot = feedback.host or slot  # where it ran (a backend may not honour the name)
            stored.add(position)
            done = await self.store.read(repeat_rows.pair_done, job.key)
            position += 1

    async def _decided(self, job: PairJob, done: list[repeat_rows.RepeatRow]) -> bool:
        """Adaptive: whether the sequential test decided on the complete pairs so far (with
        both arms' bands on the job's grading host, and a provisional band for futility)."""
        if not self.adaptive or self.decide is None:
            return False
        diffs = pair_diffs(done)
        if not diffs:
            return False
        band, provisional = await self.store.read(
            decision_bands, self.experiment_id, job, done[-1].host
        )
        decision = self.decide(diffs, *band, self.pairs, provisional=provisional)
        return decision != "continue"

    async def _grade(
        self, job: PairJob, position: int, arm: str, slot: str
    ) -> Feedback | None:
        """Open the row of ``position`` (``arm``'s), grade it (on ``slot``), close the row."""
        attempt_id, dsl, source = job.arms[arm]
        series = f"{job.key}:{arm}"
        opened = await self.store.write(
            repeat_rows.start_repeat,
            series,
            position,
            kind="final",
            problem_id=job.problem_id,
            dsl=dsl,
            source=source,
            experiment_id=self.experiment_id,
            attempt_id=attempt_id,
            pair=job.key,
            arm=arm,
        )
        if not opened:
            return None
        request = GradeRequest(
            job.problem_id,
            dsl,
            source,
            request_id=f"{attempt_id}-pair{job.comparison_id}-p{position}",
            purpose="final",
            slot=slot,
        )
        feedback = await self.retry.grade(GatedFinal(self.backend, self.gate), request)
        data = feedback.to_dict()
        host = grading_host(getattr(self.backend, "name", ""), feedback.device, feedback.host)
        stored = await self.publisher.publish(
            PairedFinalGraded(
                self.experiment_id,
                attempt_id,
                comparison_id=job.comparison_id,
                arm=arm,
                position=position,
                slot=feedback.host,
                verdict=feedback.verdict,
                runtime_ms=feedback.impl_median_ms,
            ),
            _finish,
            series,
            position,
            data,
            host,
            span_of(data, "submission"),
        )
        if stored and feedback.verdict != "error":
            self.graded += 1
        return feedback

    async def run_with(self, inner: Awaitable[None], stop: asyncio.Event) -> None:
        """Run ``inner`` (the scheduling loop and repeated finals) with the paired workers
        beside it: queue what a previous run left, then, when it ends, grade what is left
        (unless stopped). Workers are cancelled on the way out; an interrupted grading stays
        ``running`` in the store and is graded again by the next run."""
        count = self.gate.slots if self.pairs > 0 else 0
        workers = [asyncio.create_task(self.worker(), name=f"pair-{i}") for i in range(count)]
        try:
            await self.add_resolved()
            await inner
            await self.add_resolved()
            await until_either(self._idle.wait(), stop)
        finally:
            await cancel_all(workers)


def paired_for(
    config: Any,
    publisher: Publisher,
    backend: GradingBackend,
    gate: GradingGate,
    retry: RetryPolicy,
) -> PairedRepeats:
    """An engine's paired jobs as its config asks (none with ``paired_repeats = 0``); the
    adaptive test is ``engine.analysis.sequential.decide``."""
    decide: Decide | None = None
    if config.paired_adaptive:
        decide = sequential.decide
    return PairedRepeats(
        publisher=publisher,
        backend=backend,
        gate=gate,
        retry=retry,
        experiment_id=config.id,
        pairs=config.paired_repeats,
        adaptive=config.paired_adaptive,
        decide=decide,
    )
