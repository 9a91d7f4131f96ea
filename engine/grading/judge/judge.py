"""The trusted judge: one evaluation, with the submission kept in another process.

The judge owns the problem, input generation, references and float64 anchors, tolerances,
every comparison, the clock and the verdict. The submission runs in an untrusted runner
(:mod:`engine.grading.runner.loop`, jailed) that only calls ``solve()`` and reports raw data; the
eager reference runs in a reference runner forked from the judge, so both sides of the
speedup take the same path.

Order: reference runner forked (before the judge touches CUDA), eager timing (warmup and
timed draws; reduced copies of its outputs kept), runner calibration (no-op round trips),
import, correctness draws (whole outputs against the anchor), warmup and timed calls (every
output against the eager output of the same draw at secret positions, three secret timed
calls against the anchor in full), the timing cross-check, launch evidence, the kernel audit
and the bypass call. Run as ``python -m engine.grading.judge.judge --result-fd N`` with the job on
stdin, or through :func:`run_job` in a child forked from the warm parent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.judge.call_trace import CallTrace
from engine.grading.judge.clock import JudgeClock, scored_ms
from engine.grading.judge.evidence import CallEvidence, _int
from engine.grading.judge.output_checks import Expected, OutputChecks
from engine.grading.judge.rejections import InfrastructureError, Rejected
from engine.grading.judge.runner_proc import (
    RunnerDied,
    RunnerMemory,
    RunnerOptions,
    RunnerProcess,
    RunnerTimeout,
)

MAX_ERROR_CHARS = 2000
_monotonic = time.monotonic
__all__ = ["Expected", "InfrastructureError", "Judge", "Rejected", "prepare", "run_job"]


class Channel:
    """JSON lines to the process that started the judge (phases, then one result)."""

    def __init__(self, fd: int, nonce: str) -> None:
        self._fd = fd
        self._nonce = nonce

    def send(self, kind: str, data: Any) -> None:
        line = json.dumps({"nonce": self._nonce, "kind": kind, "data": data}, default=str)
        payload = (line + "\n").encode()
        while payload:
            payload = payload[os.write(self._fd, payload) :]


class Judge(OutputChecks, JudgeClock, CallEvidence):
    """One evaluation, driven by the job dictionary the parent sent."""

    def __init__(
        self,
        job: dict[str, Any],
        channel: Channel,
        spare: RunnerProcess | None = None,
        prepared: Prepared | None = None,
    ):
        import torch

        from problems.registry import get, load_problem

        self.torch = torch
        self.job = job
        self.channel = channel
        path = job.get("problem_path")
        self.problem = load_problem(Path(path)) if path else get(job["problem_id"])
        self.cuda = job["device"] == "cuda"
        self.device = "cuda" if self.cuda else "cpu"
        self.scale = job.get("scale", "full" if self.cuda else "smoke")
        self.inplace = self.problem.inplace_input_indices()
        self.timings: dict[str, float] = {}
        self.draws: list[dict[str, Any]] = []
        self.spare = spare
        self.prepared = prepared
        self.runner: RunnerProcess | None = None
        self.transport: Any = None
        self.deadline = math.inf
        self.calls = 0
        self.launches: list[int] = []
        self.gaps: list[float] = []
        self.judge_ms: list[float] = []  # release of each timed call to its outputs' report
        self.report_ms = 0.0
        self.reports_ms: list[float] = []  # the report of each timed call's outputs
        self.scored_judge_ms = 0.0
        self.runner_ms: list[float] = []
        self.allowances: dict[int, float] = {}
        self.base_threads: int | None = None
        self.rng = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
        self.result: dict[str, Any] = {
            "import_ok": None,
            "findings": [],
            "draws": self.draws,
            "timings_s": self.timings,
            "scale": self.scale,
            "timer": "judge_clock+runner_wall_sync" if self.cuda else "judge_clock+perf_counter",
        }
        self.breakdown = CallBreakdown(self.result)  # the runners' host/device split (unscored)
        self.traces: dict[str, CallTrace] = {}  # diagnostics per side (EvalConfig.call_trace)
        # an untimed call before each warm-up and timed call (EvalConfig.warm_calls); not for
        # in-place problems, whose previous inputs were written by the previous call
        self.warm_calls = bool(job.get("warm_calls")) and not self.inplace
        if self.warm_calls:  # how many ran per side (a first call has no previous inputs)
            self.result["warm_calls"] = {"eager": 0, "submission": 0}

    # -- helpers ----------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        self.channel.send("phase", name)

    def timed(self, name: str, start: float) -> None:
        self.timings[name] = round(self.timings.get(name, 0.0) + _monotonic() - start, 4)

    def stage_message(self, layout: Any) -> dict[str, Any]:
        """The request that stages a call's inputs (with the runner's warm-up spin, if any)."""
        message: dict[str, Any] = {"op": "stage", "inputs": layout}
        warmup_ms = float(self.job.get("stage_warmup_ms") or 0.0)
        if warmup_ms > 0:
            message["warm_s"] = warmup_ms / 1e3
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

    def solve_raised(self, reply: dict[str, Any], what: str) -> Rejected:
        """The rejection for a runner's ``error`` reply to a call of ``solve``; keeps the
        error text on the result."""
        error = str(reply.get("error", ""))
        self.result["error"] = error[:MAX_ERROR_CHARS]
        last = error.strip().splitlines()[-1:] or ["?"]
        return Rejected("memory" if reply.get("memory") else "crash", f"{what}: {last[0][:300]}")

    def start_trace(self, runner: RunnerProcess, side: str) -> CallTrace | None:
        """A per-call trace of one side's timed calls, when the job asks for one."""
        if not self.job.get("call_trace"):
            return None
        trace = self.traces[side] = CallTrace(runner.pid)
        return trace

    def inputs(self, seed: int) -> list[Any]:
        return self.problem.make_inputs(seed, self.device, self.scale)

    # -- eager ------------------------------------------------------------------------------
    def run_eager(self, reference: RunnerProcess) -> dict[int, Expected]:
        """Time the reference in its runner; keep reduced copies of its outputs per seed."""
        from engine.grading.judge.wire import Transport

        seeds = self.job["seeds"]
        transport = Transport(self.cuda, lambda m: reference.request(m, _monotonic() + 600)[0])
        deadline = _monotonic() + float(self.job.get("eager_timeout_s", 600.0))
        expected: dict[int, Expected] = {}
        samples: list[float] = []
        events: list[float] = []
        eager_gaps: list[float] = []
        call_gaps: list[float] = []
        reports: list[float] = []
        try:
            reference.wait_ready()
            waited = _monotonic()
            self.await_spare()
            self.timed("runner_wait", waited)  # a part of "eager", not beside it
            self.phase("eager_timing")  # the calls are timed from here (quiet, see zygote.py)
            eager_trace = self.start_trace(reference, "eager")
            clock = self.calibrate(reference, transport)
            self.result["eager_clock"] = clock
            armed, _ = reference.request({"op": "arm"}, deadline)
            if armed.get("op") != "armed":
                raise RuntimeError(f"the reference runner did not arm: {armed}")
            for kind, seed in [("warmup", s) for s in seeds["warmup"]] + [
                ("timed", s) for s in seeds["timed"]
            ]:
                inputs = self.inputs(seed)
                if self.warm_calls:
                    self.warm(reference, deadline, "eager")
                shipment = transport.ship(inputs)
                del inputs
                reference.request(self.stage_message(shipment.layout), deadline, shipment.fds)
                shipment.close()
                reply, _, judge_ms = reference.timed({"op": "call", "id": seed}, deadline)
                if reply.get("op") != "done":
                    raise RuntimeError(f"the eager reference failed: {reply.get('error')}")
                call_gap = judge_ms - float(reply["ms"])
                report, fds, report_ms = reference.timed({"op": "report"}, deadline)
                judge_ms += report_ms  # the clock runs until the outputs are described
                if kind == "timed":
                    reports.append(report_ms)
                out, _ = transport.fetch(report.get("outputs"), fds)
                for fd in fds:
                    os.close(fd)
                expected[seed] = self.reduce(out)
                del out, shipment
                if kind == "timed":
                    samples.append(scored_ms(judge_ms, clock))
                    events.append(float(reply["ms"]))
                    eager_gaps.append(judge_ms - float(reply["ms"]))
                    call_gaps.append(call_gap)
                    self.breakdown.add("eager", reply)
                    if eager_trace is not None:
                        eager_trace.add(reply, judge_ms)
            profiled = _monotonic()
            self.breakdown.settle("eager", reference, deadline, self.cuda)
            self.timed("eager_profile", profiled)  # a part of "eager", not beside it
        finally:
            transport.close()
        from engine.grading.judge.timing import summarize

        # the reference runner is trusted: its own figure (CUDA events or perf_counter around
        # the call) is the eager time; its gap to the judge's clock on real calls is what an
        # honest runner's clock misses, and sets the floor of the submission's score
        self.result["eager_median_ms"], self.result["eager_iqr_ms"] = summarize(events)
        self.result["eager_event_median_ms"] = statistics.median(events)
        clock["judge_median_ms"] = round(statistics.median(samples), 4)
        clock["real_call_gap_ms"] = round(statistics.median(eager_gaps), 4)
        clock["report_median_ms"] = round(statistics.median(reports), 4)
        # what a real call of this problem adds over a no-op, outside an honest runner's clock:
        # on the call alone (the mismatch bound) and with the report (the score's floor)
        call_excess = statistics.median(call_gaps) - clock["gap_median_ms"]
        trip_excess = clock["real_call_gap_ms"] - clock["trip_gap_median_ms"]
        clock["call_excess_ms"] = round(max(call_excess, 0.0), 4)
        clock["trip_excess_ms"] = round(max(trip_excess, 0.0), 4)
        return expected

    # -- the submission runner --------------------------------------------------------------
    def spawn_spare(self) -> None:
        """Without a runner started ahead (a cold judge), start the submission's runner now,
        beside the reference runner: its start (imports, CUDA context, profiler) then overlaps
        the judge's own instead of following the eager phase. A failure here is left to
        :meth:`start_runner`, which spawns again and reports it."""
        if self.spare is not None:
            return
        with contextlib.suppress(Exception):
            self.spare = RunnerProcess.spawn(runner_options(self.job))

    def await_spare(self) -> None:
        """Wait until the runner started ahead is ready, so that its start-up does not share
        the machine with the eager timing (errors are left to :meth:`start_runner`)."""
        if self.spare is not None:
            with contextlib.suppress(RunnerDied, RunnerTimeout):
                self.spare.wait_ready()

    def start_runner(self) -> RunnerProcess:
        options = runner_options(self.job)
        self.result["jailed"] = options.jail
        runner = self.spare if self.spare is not None else RunnerProcess.spawn(options)
        runner.memory_limit_mb = options.memory_limit_mb
        self.spare = None
        self.runner = runner
        try:
            runner.wait_ready()
        except (RunnerDied, RunnerTimeout) as exc:
            raise InfrastructureError(f"the runner did not start: {exc}") from exc
        return runner

    def load(self, runner: RunnerProcess) -> None:
        source_fd = os.memfd_create("mkb-src")
        os.write(source_fd, self.job["source"].encode())
        os.lseek(source_fd, 0, os.SEEK_SET)
        message = {
            "op": "load",
            "dsl": self.job["dsl"],
            "dsl_checks": bool(self.job.get("dsl_checks")),
            "memory_limit_mb": None if self.cuda else self.job.get("memory_limit_mb"),
        }
        try:
            reply, _ = runner.request(message, self.deadline, [source_fd])
        finally:
            os.close(source_fd)
        if reply.get("op") != "loaded":
            raise Rejected(
                "runner.protocol",
                "the runner answered the import with junk: "
                + str(reply.get("error", reply))[-300:],
            )
        if reply.get("unavailable"):
            raise InfrastructureError(f"the {self.job['dsl']} DSL is not importable on this host")
        if not reply.get("ok"):
            error = str(reply.get("error", ""))[:MAX_ERROR_CHARS]
            self.result["import_error"] = error
            code = "memory" if reply.get("memory") else "import.failed"
            last = error.strip().splitlines()[-1] if error.strip() else "import failed"
            raise Rejected(code, f"import failed: {last}")
        self.result["import_ok"] = True
        if isinstance(reply.get("threads"), int):
            self.base_threads = reply["threads"]

    # -- one call ---------------------------------------------------------------------------
    def call(self, seed: int, timed: bool = False, warm: bool = False) -> tuple[Any, list[Any]]:
        """Run one call in the runner; returns (judge-owned outputs, pristine inputs). ``warm``:
        an untimed call on the previous inputs first (EvalConfig.warm_calls)."""

        assert self.runner is not None
        inputs = self.inputs(seed)
        if warm:
            self.warm(self.runner, self.deadline, "submission")
        shipment = self.transport.ship(inputs)
        staged, _ = self.runner.request(
            self.stage_message(shipment.layout), self.deadline, shipment.fds
        )
        shipment.close()
        if staged.get("op") != "staged":
            raise Rejected("runner.protocol", "the runner did not stage the inputs")
        call_id = os.urandom(8).hex()
        reply, _, judge_ms = self.runner.timed({"op": "call", "id": call_id}, self.deadline)
        op = reply.get("op")
        if op == "error" and reply.get("id") == call_id:
            raise self.solve_raised(reply, "solve() raised")
        if op != "done" or reply.get("id") != call_id:
            raise Rejected("runner.protocol", "the runner's answer does not match the call")
        out, described, report = self.fetch_outputs()
        # the score's clock runs from releasing the call until the outputs are described: work
        # a patched runner does after "done" (in its report, a signal handler) is counted
        self.scored_judge_ms = judge_ms + self.report_ms
        reply["threads"] = max(_int(reply.get("threads")), _int(report.get("threads")))
        self.calls += 1
        if timed and "submission" in self.traces:
            self.traces["submission"].add(reply, judge_ms)
        self.check_evidence(reply, judge_ms, timed)
        out = self.check_memory(out, described, shipment, inputs)
        self.check_stable(out, described)
        return out, inputs

    def fetch_outputs(self) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
        """Ask the runner where the last outputs lie; judge-owned copies of them."""
        from engine.grading.judge.wire import ProtocolError

        assert self.runner is not None
        report, fds, self.report_ms = self.runner.timed({"op": "report"}, self.deadline)
        try:
            if report.get("op") != "outputs":
                raise Rejected("runner.protocol", "the runner did not report its outputs")
            out, described = self.transport.fetch(report.get("outputs"), fds)
        except ProtocolError as exc:
            raise Rejected("runner.protocol", f"unusable output description: {exc}") from exc
        finally:
            for fd in fds:
                os.close(fd)
        return out, described, report

    def flag(self, name: str) -> None:
        flags = self.result.setdefault("flags", [])
        if name not in flags:
            flags.append(name)

    def run(self) -> dict[str, Any]:
        from engine.grading.judge.wire import Transport

        torch = self.torch
        seeds = self.job["seeds"]
        result = self.result
        start = _monotonic()
        self.spawn_spare()
        reference = self.reference_runner()
        self.timed("reference_runner", start)
        try:
            result["device"] = torch.cuda.get_device_name() if self.cuda else "cpu (preview)"
            if not self.cuda:
                torch.set_num_threads(1)
            self.phase("eager")
            start = _monotonic()
            expected = self.run_eager(reference)
            self.timed("eager", start)
        finally:
            reference.close()
        self.phase("eager_done")
        self.deadline = _monotonic() + float(self.job.get("timeout_s", 600.0))

        start = _monotonic()
        runner = self.start_runner()
        self.timed("runner_start", start)
        start = _monotonic()
        self.transport = Transport(self.cuda, lambda m: runner.request(m, self.deadline)[0])
        self.result["clock"] = self.calibrate(runner, self.transport)
        self.timed("calibration", start)
        self.base_threads = runner.ready.get("threads")
        self.phase("import")
        start = _monotonic()
        self.load(runner)
        self.timed("import", start)

        self.phase("correctness")
        start = _monotonic()
        for i, seed in enumerate(seeds["correctness"]):
            out, pristine = self.call(seed)
            if not self.check_anchor(out, pristine, "correctness", i):
                raise self.rejection_for("correctness")
        self.timed("correctness", start)

        self.phase("warmup")
        start = _monotonic()
        for i, seed in enumerate(seeds["warmup"]):
            out, _ = self.call(seed, warm=self.warm_calls)
            self.check_sampled(out, expected[seed], "warmup", i)
        self.timed("warmup", start)

        self.phase("timing")
        self.start_trace(runner, "submission")
        start = _monotonic()
        rechecks = set(self.job.get("recheck", []))
        for i, seed in enumerate(seeds["timed"]):
            out, pristine = self.call(seed, timed=True, warm=self.warm_calls)
            self.check_sampled(out, expected[seed], "timed", i)
            if i in rechecks and not self.check_anchor(out, pristine, "recheck", i):
                raise self.rejection_for("recheck")
        self.timed("timing", start)
        start = _monotonic()
        self.settle_timing()  # with the submission's profiled breakdown
        self.timed("settle", start)

        self.speed_of_light()
        self.launch_evidence()
        if self.cuda:
            result["judge_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["verdict"] = "pass" if self.cuda else "preview"
        result["reason"] = None
        result["message"] = (
            "scored pass"
            if self.cuda
            else "CPU PREVIEW: every check that can run without a GPU passed (not a scored pass)"
        )
        return result

    def reference_runner(self) -> RunnerProcess:
        """The prepared reference runner armed with this problem, or a freshly forked one."""
        prepared, self.prepared = self.prepared, None
        self.result["judge_started_ahead"] = prepared is not None and prepared.device == self.device
        if prepared is None or prepared.device != self.device:
            if prepared is not None:
                prepared.reference.close()
            return RunnerProcess.fork_reference(self.device, self.problem.reference)
        message = {"op": "reference", "problem_id": self.job.get("problem_id")}
        if self.job.get("problem_path"):
            message["problem_path"] = self.job["problem_path"]
        reply, _ = prepared.reference.request(message, _monotonic() + 120)
        if reply.get("op") != "referenced":
            prepared.reference.close()
            raise InfrastructureError(f"the reference runner did not load the problem: {reply}")
        return prepared.reference

    def close(self) -> None:
        if self.traces:
            self.result["call_trace"] = {side: t.summary() for side, t in self.traces.items()}
        if self.prepared is not None:
            self.prepared.reference.close()
        if self.transport is not None:
            with contextlib.suppress(Exception):  # a broken CUDA context must not hide the verdict
                self.transport.close()
        for proc in (self.runner, self.spare):
            if proc is not None:
                tail = proc.log_tail()
                if tail:
                    sys.stderr.write("--- the runner's output (untrusted) ---\n" + tail + "\n")
                    sys.stderr.flush()
                proc.close()


def runner_options(job: dict[str, Any]) -> RunnerOptions:
    """How the submission's runner for ``job`` is started."""
    return RunnerOptions(
        device="cuda" if job["device"] == "cuda" else "cpu",
        preload_dsls=bool(job.get("preload_dsls", True)),
        dsl=job.get("dsl"),  # started for this job: its own DSL only
        jail=not job.get("unsafe_no_jail", False),
        memory_limit_mb=job.get("memory_limit_mb") or job.get("rss_limit_mb"),
    )


@dataclass
class Prepared:
    """What a judge started ahead of its job takes off the job's clock: the CUDA context
    and a reference runner (forked first, CUDA ready, not yet given a problem)."""

    device: str
    reference: RunnerProcess


def prepare(device: str) -> Prepared:
    """Fork the reference runner (before this process touches CUDA), then warm CUDA here."""
    import torch

    reference = RunnerProcess.fork_reference(device, None)
    if device == "cuda":
        square = torch.ones(64, 64, dtype=torch.float64, device="cuda")
        float((square @ square).sum())  # context and the BLAS handle the anchors use
    reference.wait_ready()
    return Prepared(device, reference)


def trimmed_traceback(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return text if len(text) <= MAX_ERROR_CHARS else "…" + text[-MAX_ERROR_CHARS:]


def run_job(
    job: dict[str, Any],
    result_fd: int,
    spare: RunnerProcess | None = None,
    prepared: Prepared | None = None,
) -> None:
    """Judge ``job`` and send the result on ``result_fd``."""
    channel = Channel(result_fd, job["nonce"])
    judge: Judge | None = None
    try:
        judge = Judge(job, channel, spare, prepared)
        spare = prepared = None
        result = judge.run()
    except Rejected as exc:
        result = judge.result if judge is not None else {}
        result.update(verdict="fail", reason=exc.code, message=str(exc))
    except RunnerTimeout:
        result = judge.result if judge is not None else {}
        result.update(verdict="fail", reason="timeout", message="time limit exceeded")
    except RunnerMemory:
        result = judge.result if judge is not None else {}
        result.update(
            verdict="fail", reason="memory", message="killed for exceeding the memory limit"
        )
    except RunnerDied as exc:
        result = judge.result if judge is not None else {}
        ran = judge is not None and judge.result.get("import_ok") is not None
        result.update(
            verdict="fail" if ran else "error",
            reason="crash",
            message=f"the runner died: {exc}",
        )
    except InfrastructureError as exc:
        result = judge.result if judge is not None else {}
        result.update(verdict="error", reason="crash", message=str(exc))
    except BaseException as exc:  # noqa: BLE001 - our own failure: an error, never a pass
        result = judge.result if judge is not None else {}
        result.update(
            verdict="error",
            reason="crash",
            message=f"judge error: {type(exc).__name__}: {exc}",
            error=trimmed_traceback(exc),
        )
    finally:
        if judge is not None:
            judge.close()
        if spare is not None:
            spare.close()
        if prepared is not None:
            prepared.reference.close()
    channel.send("result", result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.grading.judge.judge")
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.set_inheritable(args.result_fd, False)
    # a cold judge: the submission's runner starts first, before this process imports torch
    # and the problem (seconds), so that its own start overlaps them (a failure here is left
    # to the judge, which spawns again and reports it)
    spare: RunnerProcess | None = None
    with contextlib.suppress(Exception):
        spare = RunnerProcess.spawn(runner_options(job))
    run_job(job, args.result_fd, spare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
