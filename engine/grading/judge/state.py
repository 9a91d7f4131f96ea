"""The judge's explicit state: one :class:`Evaluation` (the job, the problem, where it runs,
the result it reports) and the :class:`CallFigures` its clock and its evidence checks share.

The judge's concerns (:mod:`.clock`, :mod:`.evidence`, :mod:`.output_checks`, :mod:`.eager`)
each receive these objects in their constructor; nothing else is shared between them.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.judge.call_trace import CallTrace
from engine.grading.verdict import Rejected

if TYPE_CHECKING:
    from engine.grading.judge.runner_proc import RunnerProcess

MAX_ERROR_CHARS = 2000
# how long a runner polls for the next call after a warm-up or timed call's report (ms; the
# runner caps it at channel.MAX_SPIN_S): above the judge's 3–13 ms between small calls on the
# H100 (2026-12-07), below the time a long problem's checks take
CALL_GAP_SPIN_MS = "100"
_monotonic = time.monotonic


class Sender(Protocol):
    """Where the judge's messages go (:class:`engine.grading.judge.job.Channel`)."""

    def send(self, kind: str, data: Any) -> None: ...


@dataclass
class Evaluation:
    """One evaluation: what the parent asked for, the problem, and the result being built.

    ``result`` is the dictionary sent back to the parent; ``timings`` and ``draws`` are parts
    of it. ``runner`` and ``transport`` are the submission's runner and the channel its inputs
    and outputs travel on, once started; ``deadline`` the submission's time limit."""

    job: dict[str, Any]
    problem: Any
    channel: Sender
    cuda: bool
    scale: str
    result: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    draws: list[dict[str, Any]] = field(default_factory=list)
    inplace: dict[int, int] = field(default_factory=dict)  # output → input updated in place
    runner: RunnerProcess | None = None
    transport: Any = None  # engine.grading.judge.wire.Transport (imports torch)
    deadline: float = math.inf
    between_calls: bool = False  # in the warm-up and timed calls (see report_message)

    @classmethod
    def from_job(cls, job: dict[str, Any], channel: Sender) -> Evaluation:
        """The evaluation of ``job``, its problem loaded and its result started."""
        from problems.registry import get, load_problem

        path = job.get("problem_path")
        problem = load_problem(Path(path)) if path else get(job["problem_id"])
        cuda = job["device"] == "cuda"
        scale = job.get("scale", "full" if cuda else "smoke")
        evaluation = cls(job, problem, channel, cuda, scale)
        evaluation.inplace = problem.inplace_input_indices()
        evaluation.result.update(
            import_ok=None,
            findings=[],
            draws=evaluation.draws,
            timings_s=evaluation.timings,
            scale=scale,
            timer="judge_clock+runner_wall_sync" if cuda else "judge_clock+perf_counter",
        )
        if evaluation.warm_calls:  # how many ran per side (a first call has no previous inputs)
            evaluation.result["warm_calls"] = {"eager": 0, "submission": 0}
        return evaluation

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "cpu"

    @property
    def warm_calls(self) -> bool:
        """An untimed call before each warm-up and timed call (EvalConfig.warm_calls); not for
        in-place problems, whose previous inputs were written by the previous call."""
        return bool(self.job.get("warm_calls")) and not self.inplace

    # -- reporting ----------------------------------------------------------------------------
    def flag(self, name: str) -> None:
        """Record a flag on the result (once): a finding that is not a rejection."""
        flags = self.result.setdefault("flags", [])
        if name not in flags:
            flags.append(name)

    def phase(self, name: str) -> None:
        self.channel.send("phase", name)

    def timed(self, name: str, start: float) -> None:
        """Add the time since ``start`` (monotonic) to the timing ``name``."""
        self.timings[name] = round(self.timings.get(name, 0.0) + _monotonic() - start, 4)

    def solve_raised(self, reply: dict[str, Any], what: str) -> Rejected:
        """The rejection for a runner's ``error`` reply to a call of ``solve``; keeps the
        error text on the result."""
        error = str(reply.get("error", ""))
        self.result["error"] = error[:MAX_ERROR_CHARS]
        last = error.strip().splitlines()[-1:] or ["?"]
        return Rejected("memory" if reply.get("memory") else "crash", f"{what}: {last[0][:300]}")

    # -- requests the job shapes --------------------------------------------------------------
    def inputs(self, seed: int) -> list[Any]:
        return self.problem.make_inputs(seed, self.device, self.scale)

    def stage_message(self, layout: Any) -> dict[str, Any]:
        """The request that stages a call's inputs (with the runner's warm-up spin, if any)."""
        message: dict[str, Any] = {"op": "stage", "inputs": layout}
        warmup_ms = float(self.job.get("stage_warmup_ms") or 0.0)
        if warmup_ms > 0:
            message["warm_s"] = warmup_ms / 1e3
        return message

    def report_message(self, between_calls: bool | None = None) -> dict[str, Any]:
        """The request for a call's outputs. Between warm-up and timed calls (``between_calls``,
        by default this evaluation's) it asks the runner to poll for the next request for
        ``then_spin_s`` before it blocks, so that it is not asleep when the next call's inputs
        come (both sides alike; on a GPU only, where runners poll). ``MKB_CALL_GAP_SPIN_MS``
        in the judge's environment sets it (A/B runs; 0: the runner's default)."""
        message: dict[str, Any] = {"op": "report"}
        if self.between_calls if between_calls is None else between_calls:
            spin_ms = os.environ.get("MKB_CALL_GAP_SPIN_MS", CALL_GAP_SPIN_MS)
            with contextlib.suppress(ValueError):
                if float(spin_ms) > 0:
                    message["then_spin_s"] = float(spin_ms) / 1e3
        return message

    def warm(self, runner: RunnerProcess, deadline: float, side: str) -> None:
        """The untimed call on the previous inputs that precedes a warm-up or timed call
        (EvalConfig.warm_calls). Sent before the next inputs are written, so the submission
        never sees them outside the timed call."""
        reply, _ = runner.request({"op": "warm"}, deadline)
        if reply.get("op") == "warmed":
            self.result["warm_calls"][side] += bool(reply.get("ran"))
            return
        if side == "eager":
            error = str(reply.get("error", reply))[-300:]
            raise RuntimeError(f"the eager reference failed in a warm call: {error}")
        if reply.get("op") != "error":
            raise Rejected("runner.protocol", "the runner did not answer the warm call")
        raise self.solve_raised(reply, "solve() raised in an untimed warm call")


@dataclass
class CallFigures:
    """What the timed calls measured, shared by the clock (which settles the score from it)
    and the evidence checks (which record it call by call)."""

    breakdown: CallBreakdown  # the runners' host/device split (unscored)
    tracing: bool = False  # per-call traces asked for (EvalConfig.call_trace)
    gaps: list[float] = field(default_factory=list)  # judge clock − runner figure, per call
    judge_ms: list[float] = field(default_factory=list)  # release to the outputs' report
    reports_ms: list[float] = field(default_factory=list)  # the report of each call's outputs
    runner_ms: list[float] = field(default_factory=list)  # the runner's own figure
    launches: list[int] = field(default_factory=list)  # DSL launches per call
    calls: int = 0  # submission calls so far (timed or not)
    base_threads: int | None = None  # the runner's native threads before the submission's
    traces: dict[str, CallTrace] = field(default_factory=dict)  # diagnostics per side

    def start_trace(self, side: str, runner_pid: int) -> CallTrace | None:
        """A per-call trace of one side's timed calls, when the job asks for one."""
        if not self.tracing:
            return None
        trace = self.traces[side] = CallTrace(runner_pid)
        return trace
