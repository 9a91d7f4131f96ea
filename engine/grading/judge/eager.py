"""The eager phase: the reference timed in its own runner, reduced copies of its outputs kept
for the submission's timed checks, and the clock figures that set the score's floor."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.grading.judge.call_trace import CallTrace
from engine.grading.judge.clock import JudgeClock, scored_ms
from engine.grading.judge.output_checks import Expected
from engine.grading.judge.runner_proc import RunnerProcess
from engine.grading.judge.state import CallFigures, Evaluation

_monotonic = time.monotonic


@dataclass
class EagerSamples:
    """The reference's timed calls, call by call."""

    judge: list[float] = field(default_factory=list)  # the judge's clock less the no-op trip
    events: list[float] = field(default_factory=list)  # the reference runner's own figure
    gaps: list[float] = field(default_factory=list)  # judge's clock (with report) − figure
    call_gaps: list[float] = field(default_factory=list)  # the same without the report
    reports: list[float] = field(default_factory=list)  # the report of the outputs


class EagerPhase:
    """Times the reference in its runner (trusted: its own figure is the eager time). Gets
    the evaluation's clock (calibration) and ``reduce`` (the outputs kept for the timed
    checks); ``await_spare`` waits for the submission's runner started ahead, so that its
    start-up does not share the machine with the eager timing."""

    def __init__(
        self,
        evaluation: Evaluation,
        figures: CallFigures,
        clock: JudgeClock,
        reduce: Callable[[Any], Expected],
        await_spare: Callable[[], None],
    ) -> None:
        self.evaluation = evaluation
        self.figures = figures
        self.clock = clock
        self.reduce = reduce
        self.await_spare = await_spare

    def run(self, reference: RunnerProcess) -> dict[int, Expected]:
        """Warm-up and timed calls of the reference; its reduced outputs per seed."""
        from engine.grading.judge.wire import Transport

        evaluation = self.evaluation
        seeds = evaluation.job["seeds"]
        transport = Transport(
            evaluation.cuda, lambda m: reference.request(m, _monotonic() + 600)[0]
        )
        deadline = _monotonic() + float(evaluation.job.get("eager_timeout_s", 600.0))
        expected: dict[int, Expected] = {}
        samples = EagerSamples()
        try:
            reference.wait_ready()
            waited = _monotonic()
            self.await_spare()
            evaluation.timed("runner_wait", waited)  # a part of "eager", not beside it
            evaluation.phase("eager_timing")  # the calls are timed from here (quiet, see zygote.py)
            trace = self.figures.start_trace("eager", reference.pid)
            clock = self.clock.calibrate(reference, transport)
            evaluation.result["eager_clock"] = clock
            armed, _ = reference.request({"op": "arm"}, deadline)
            if armed.get("op") != "armed":
                raise RuntimeError(f"the reference runner did not arm: {armed}")
            for kind, seed in [("warmup", s) for s in seeds["warmup"]] + [
                ("timed", s) for s in seeds["timed"]
            ]:
                timed = (samples, trace) if kind == "timed" else None
                expected[seed] = self.call(reference, transport, deadline, seed, clock, timed)
            profiled = _monotonic()
            self.figures.breakdown.settle("eager", reference, deadline, evaluation.cuda)
            evaluation.timed("eager_profile", profiled)  # a part of "eager", not beside it
        finally:
            transport.close()
        settle(evaluation.result, clock, samples)
        return expected

    def call(
        self,
        reference: RunnerProcess,
        transport: Any,
        deadline: float,
        seed: int,
        clock: dict[str, float],
        timed: tuple[EagerSamples, CallTrace | None] | None,
    ) -> Expected:
        """One call of the reference on the inputs of ``seed``, its outputs reduced;
        ``timed``: where a timed call's figures go (None for a warm-up call)."""
        evaluation = self.evaluation
        inputs = evaluation.inputs(seed)
        if evaluation.warm_calls:
            evaluation.warm(reference, deadline, "eager")
        shipment = transport.ship(inputs)
        del inputs
        reference.request(evaluation.stage_message(shipment.layout), deadline, shipment.fds)
        shipment.close()
        reply, _, judge_ms = reference.timed({"op": "call", "id": seed}, deadline)
        if reply.get("op") != "done":
            raise RuntimeError(f"the eager reference failed: {reply.get('error')}")
        call_gap = judge_ms - float(reply["ms"])
        report, fds, report_ms = reference.timed(evaluation.report_message(True), deadline)
        judge_ms += report_ms  # the clock runs until the outputs are described
        out, _ = transport.fetch(report.get("outputs"), fds)
        for fd in fds:
            os.close(fd)
        reduced = self.reduce(out)
        del out, shipment
        if timed is not None:
            samples, trace = timed
            samples.reports.append(report_ms)
            samples.judge.append(scored_ms(judge_ms, clock))
            samples.events.append(float(reply["ms"]))
            samples.gaps.append(judge_ms - float(reply["ms"]))
            samples.call_gaps.append(call_gap)
            self.figures.breakdown.add("eager", reply)
            if trace is not None:
                trace.add(reply, judge_ms)
        return reduced


def settle(result: dict[str, Any], clock: dict[str, float], samples: EagerSamples) -> None:
    """The eager time and what the judge's clock adds to a real call of this problem."""
    from engine.grading.judge.timing import summarize

    # the reference runner is trusted: its own figure (CUDA events or perf_counter around
    # the call) is the eager time; its gap to the judge's clock on real calls is what an
    # honest runner's clock misses, and sets the floor of the submission's score
    result["eager_median_ms"], result["eager_iqr_ms"] = summarize(samples.events)
    result["eager_event_median_ms"] = statistics.median(samples.events)
    clock["judge_median_ms"] = round(statistics.median(samples.judge), 4)
    clock["real_call_gap_ms"] = round(statistics.median(samples.gaps), 4)
    clock["report_median_ms"] = round(statistics.median(samples.reports), 4)
    # what a real call of this problem adds over a no-op, outside an honest runner's clock:
    # on the call alone (the mismatch bound) and with the report (the score's floor)
    call_excess = statistics.median(samples.call_gaps) - clock["gap_median_ms"]
    trip_excess = clock["real_call_gap_ms"] - clock["trip_gap_median_ms"]
    clock["call_excess_ms"] = round(max(call_excess, 0.0), 4)
    clock["trip_excess_ms"] = round(max(trip_excess, 0.0), 4)
