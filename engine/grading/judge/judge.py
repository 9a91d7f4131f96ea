"""The trusted judge: one evaluation, with the submission kept in another process.

The judge owns the problem, input generation, references and float64 anchors, tolerances,
every comparison and the clock; its outcome becomes a verdict in
:func:`engine.grading.verdict.decide`. The submission runs in an untrusted runner
(:mod:`engine.grading.runner.loop`, jailed) that only calls ``solve()`` and reports raw data; the
eager reference runs in a reference runner forked from the judge, so both sides of the
speedup take the same path.

Order: reference runner forked (before the judge touches CUDA), eager timing (warmup and
timed draws; reduced copies of its outputs kept), runner calibration (no-op round trips),
import, correctness draws (whole outputs against the anchor), warmup and timed calls (every
output against the eager output of the same draw at secret positions, three secret timed
calls against the anchor in full), the timing cross-check, launch evidence, the kernel audit
and the bypass call.

:class:`Judge` composes one object per concern, each given the evaluation's explicit state
(:mod:`.state`): the clock (:mod:`.clock`), the output checks (:mod:`.output_checks`), the
call evidence (:mod:`.evidence`) and the eager phase (:mod:`.eager`). The process around it
is :mod:`.job`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from engine.grading.admission import INFRA_DEVICE_LOST
from engine.grading.judge import placement
from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.judge.clock import JudgeClock
from engine.grading.judge.eager import EagerPhase
from engine.grading.judge.evidence import CallEvidence, _int
from engine.grading.judge.output_checks import Draw, Expected, OutputChecks
from engine.grading.judge.prepared import Prepared
from engine.grading.judge.runner_proc import (
    RunnerDied,
    RunnerOptions,
    RunnerProcess,
    RunnerTimeout,
)
from engine.grading.judge.state import MAX_ERROR_CHARS, CallFigures, Evaluation
from engine.grading.verdict import InfrastructureError, Passed, Rejected

_monotonic = time.monotonic


class Judge:
    """One evaluation, driven by the job dictionary the parent sent. ``options``: how the
    submission's runner starts; ``spare``: one started ahead; ``prepared``: a reference
    runner and CUDA context made ready before the job came."""

    def __init__(
        self,
        evaluation: Evaluation,
        options: RunnerOptions,
        spare: RunnerProcess | None = None,
        prepared: Prepared | None = None,
    ) -> None:
        self.evaluation = evaluation
        self.options = options
        self.spare = spare
        self.prepared = prepared
        self.passed = False
        # where this grading's compiled modules are kept if it passes (compile_cache.py)
        self.keep_compiled: tuple[Path, str, bytes] | None = None
        self.figures = CallFigures(
            CallBreakdown(evaluation.result), tracing=bool(evaluation.job.get("call_trace"))
        )
        self.clock = JudgeClock(evaluation, self.figures)
        self.checks = OutputChecks(evaluation, self.fetch_outputs)
        self.evidence = CallEvidence(evaluation, self.figures, self.call, self.checks.check_anchor)
        self.eager = EagerPhase(
            evaluation, self.figures, self.clock, self.checks.reduce, self.await_spare
        )

    @property
    def result(self) -> dict[str, Any]:
        """The result sent to the parent."""
        return self.evaluation.result

    # -- the phases -------------------------------------------------------------------------
    def run(self) -> Passed:
        """Every check, in order; a failed one raises (:class:`Rejected`, ...)."""
        expected = self.run_eager()
        runner = self.start_submission()
        self.correctness()
        self.timed_calls(runner, expected)
        self.evidence.speed_of_light()
        self.evidence.launch_evidence()
        if self.evaluation.cuda:
            import torch

            self.result["judge_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        self.passed = True
        return Passed(self.evaluation.cuda)

    def run_eager(self) -> dict[int, Expected]:
        """The reference runner and the eager phase; then the submission's deadline starts."""
        import torch

        evaluation = self.evaluation
        start = _monotonic()
        self.spawn_spare()
        reference = self.reference_runner()
        evaluation.timed("reference_runner", start)
        try:
            self.result["device"] = (
                torch.cuda.get_device_name() if evaluation.cuda else "cpu (preview)"
            )
            if evaluation.cuda:
                check_target(self.result["device"], str(evaluation.job.get("source", "")))
                self.result["cpu_placement"] = placement.describe()  # None: left to the OS
            else:
                torch.set_num_threads(1)
            evaluation.phase("eager")
            start = _monotonic()
            expected = self.eager.run(reference)
            evaluation.timed("eager", start)
        finally:
            reference.close()
        evaluation.phase("eager_done")
        evaluation.deadline = _monotonic() + float(evaluation.job.get("timeout_s", 600.0))
        return expected

    def start_submission(self) -> RunnerProcess:
        """The submission's runner: started, its clock calibrated, the submission imported."""
        from engine.grading.judge.wire import ProtocolError, Transport

        evaluation = self.evaluation
        start = _monotonic()
        runner = self.start_runner()
        evaluation.timed("runner_start", start)
        start = _monotonic()
        evaluation.transport = Transport(
            evaluation.cuda, lambda m: runner.request(m, evaluation.deadline)[0]
        )
        self.result["clock"] = self.clock.calibrate(runner, evaluation.transport)
        evaluation.timed("calibration", start)
        try:  # before the import: a runner that cannot use the device is our failure
            evaluation.transport.preflight()
        except ProtocolError as exc:
            raise InfrastructureError(
                f"the runner could not use the device before the submission ran: {exc}",
                reason=INFRA_DEVICE_LOST,
            ) from exc
        self.figures.base_threads = runner.ready.get("threads")
        evaluation.phase("import")
        start = _monotonic()
        self.load(runner)
        evaluation.timed("import", start)
        return runner

    def correctness(self) -> None:
        """Whole outputs against the float64 anchor, one draw per correctness seed."""
        evaluation = self.evaluation
        evaluation.phase("correctness")
        start = _monotonic()
        for i, seed in enumerate(evaluation.job["seeds"]["correctness"]):
            called = _monotonic()
            draw = self.call(seed)
            # parts of "correctness", not beside it: the first call (the DSL's compile and
            # the runner's first use of the device), then the anchor checks of every draw
            if i == 0:
                evaluation.timed("correctness_first_call", called)
            checked = _monotonic()
            if not self.checks.check_anchor(draw, "correctness", i):
                raise self.checks.rejection_for("correctness")
            evaluation.timed("correctness_anchor", checked)
            del draw  # not held while the next draw is made
        evaluation.timed("correctness", start)

    def timed_calls(self, runner: RunnerProcess, expected: dict[int, Expected]) -> None:
        """Warm-up and timed calls, each output against the eager output of its draw (and
        the secret rechecks against the anchor); then the score from the clock."""
        evaluation, checks = self.evaluation, self.checks
        seeds, warm = evaluation.job["seeds"], evaluation.warm_calls
        evaluation.phase("warmup")
        start = _monotonic()
        evaluation.between_calls = True  # the runner polls between these calls (state.py)
        for i, seed in enumerate(seeds["warmup"]):
            checks.check_sampled(self.call(seed, warm=warm).out, expected[seed], "warmup", i)
        evaluation.timed("warmup", start)

        evaluation.phase("timing")
        self.figures.start_trace("submission", runner.pid)
        start = _monotonic()
        rechecks = set(evaluation.job.get("recheck", []))
        for i, seed in enumerate(seeds["timed"]):
            draw = self.call(seed, timed=True, warm=warm)
            checked = _monotonic()
            checks.check_sampled(draw.out, expected[seed], "timed", i)
            if i in rechecks and not checks.check_anchor(draw, "recheck", i):
                raise checks.rejection_for("recheck")
            evaluation.timed("timing_checks", checked)  # a part of "timing", not beside it
            del draw  # not held while the next draw is made
        evaluation.between_calls = False
        evaluation.timed("timing", start)
        start = _monotonic()
        self.clock.settle_timing()  # with the submission's profiled breakdown
        evaluation.timed("settle", start)

    # -- the runners ------------------------------------------------------------------------
    def spawn_spare(self) -> None:
        """Without a runner started ahead (a cold judge), start the submission's runner now,
        beside the reference runner: its start (imports, CUDA context, profiler) then overlaps
        the judge's own instead of following the eager phase. A failure here is left to
        :meth:`start_runner`, which spawns again and reports it."""
        if self.spare is not None:
            return
        with contextlib.suppress(Exception):
            self.spare = RunnerProcess.spawn(self.options)

    def await_spare(self) -> None:
        """Wait until the runner started ahead is ready, so that its start-up does not share
        the machine with the eager timing (errors are left to :meth:`start_runner`)."""
        if self.spare is not None:
            with contextlib.suppress(RunnerDied, RunnerTimeout):
                self.spare.wait_ready()

    def start_runner(self) -> RunnerProcess:
        options = self.options
        self.result["jailed"] = options.jail
        runner = self.spare if self.spare is not None else RunnerProcess.spawn(options)
        self.spare = None
        runner = started_or_fresh(runner, options)
        runner.memory_limit_mb = options.memory_limit_mb
        self.result["runner_from_template"] = runner.template_pid is not None
        self.evaluation.runner = runner
        try:
            runner.wait_ready()
        except (RunnerDied, RunnerTimeout) as exc:
            raise InfrastructureError(f"the runner did not start: {exc}") from exc
        return runner

    def reference_runner(self) -> RunnerProcess:
        """The prepared reference runner armed with this problem, or a freshly forked one."""
        evaluation = self.evaluation
        prepared, self.prepared = self.prepared, None
        started_ahead = prepared is not None and prepared.device == evaluation.device
        self.result["judge_started_ahead"] = started_ahead
        if prepared is None or prepared.device != evaluation.device:
            if prepared is not None:
                prepared.reference.close()
            return RunnerProcess.fork_reference(evaluation.device, evaluation.problem.reference)
        message = {"op": "reference", "problem_id": evaluation.job.get("problem_id")}
        if evaluation.job.get("problem_path"):
            message["problem_path"] = evaluation.job["problem_path"]
        reply, _ = prepared.reference.request(message, _monotonic() + 120)
        if reply.get("op") != "referenced":
            prepared.reference.close()
            raise InfrastructureError(f"the reference runner did not load the problem: {reply}")
        return prepared.reference

    def load(self, runner: RunnerProcess) -> None:
        """The submission's import in its runner."""
        evaluation = self.evaluation
        job = evaluation.job
        source_fd = os.memfd_create("mkb-src")
        os.write(source_fd, job["source"].encode())
        os.lseek(source_fd, 0, os.SEEK_SET)
        message = {
            "op": "load",
            "dsl": job["dsl"],
            "dsl_checks": bool(job.get("dsl_checks")),
            "memory_limit_mb": None if evaluation.cuda else job.get("memory_limit_mb"),
        }
        fds = [source_fd]
        compiled = self.compiled_entry(message)
        if compiled is not None:
            fds.append(compiled)
        try:
            reply, _ = runner.request(message, evaluation.deadline, fds)
        finally:
            for fd in fds:
                os.close(fd)
        if reply.get("op") != "loaded":
            raise Rejected(
                "runner.protocol",
                "the runner answered the import with junk: "
                + str(reply.get("error", reply))[-300:],
            )
        if reply.get("unavailable"):
            raise InfrastructureError(f"the {job['dsl']} DSL is not importable on this host")
        if not reply.get("ok"):
            error = str(reply.get("error", ""))[:MAX_ERROR_CHARS]
            self.result["import_error"] = error
            code = "memory" if reply.get("memory") else "import.failed"
            last = error.strip().splitlines()[-1] if error.strip() else "import failed"
            raise Rejected(code, f"import failed: {last}")
        self.result["import_ok"] = True
        if isinstance(reply.get("threads"), int):
            self.figures.base_threads = reply["threads"]

    def compiled_entry(self, message: dict[str, Any]) -> int | None:
        """This source's compiled modules from an earlier grading (a private copy), if any;
        else the key under which this grading's are kept should it pass. ``message`` gets
        this grading's tag key (the runner tags what its DSL compiled; compiled.py). Jailed
        runners only: an unjailed one could write the cache itself."""
        from engine.grading.judge import compile_cache

        root = compile_cache.cache_root()
        if root is None or not self.options.jail:
            return None
        job = self.evaluation.job
        device = str(self.result.get("device", ""))
        key = compile_cache.entry_key(job["source"], job["dsl"], device, compile_cache.toolchain())
        secret = os.urandom(32)
        message["compile_key"] = secret.hex()
        fd = compile_cache.deliver(root, key)
        self.result["compile_cache"] = "loaded" if fd is not None else "missed"
        if fd is None:
            self.keep_compiled = (root, key, secret)
        return fd

    # -- one call ---------------------------------------------------------------------------
    def call(self, seed: int, timed: bool = False, warm: bool = False) -> Draw:
        """Run one call in the runner; returns the judge-owned outputs and the pristine
        inputs. ``warm``: an untimed call on the previous inputs first (EvalConfig.warm_calls)."""
        from engine.grading.judge.wire import ProtocolError

        evaluation = self.evaluation
        runner = evaluation.runner
        assert runner is not None
        inputs = evaluation.inputs(seed)
        if warm:
            evaluation.warm(runner, evaluation.deadline, "submission")
        try:  # the runner's device was sound before the import (preflight)
            shipment = evaluation.transport.ship(inputs)
        except ProtocolError as exc:
            raise Rejected("runner.protocol", f"the runner did not take the inputs: {exc}") from exc
        staged, _ = runner.request(
            evaluation.stage_message(shipment.layout), evaluation.deadline, shipment.fds
        )
        shipment.close()
        if staged.get("op") != "staged":
            raise Rejected("runner.protocol", "the runner did not stage the inputs")
        call_id = os.urandom(8).hex()
        reply, _, judge_ms = runner.timed({"op": "call", "id": call_id}, evaluation.deadline)
        op = reply.get("op")
        if op == "error" and reply.get("id") == call_id:
            raise evaluation.solve_raised(reply, "solve() raised")
        if op != "done" or reply.get("id") != call_id:
            raise Rejected("runner.protocol", "the runner's answer does not match the call")
        out, described, report, report_ms = self.fetch_outputs()
        reply["threads"] = max(_int(reply.get("threads")), _int(report.get("threads")))
        self.figures.calls += 1
        trace = self.figures.traces.get("submission")
        if timed and trace is not None:
            trace.add(reply, judge_ms)
        self.evidence.check_evidence(reply, judge_ms, report_ms, timed)
        out = self.checks.check_memory(out, described, shipment, inputs)
        self.checks.check_stable(out, described)
        return Draw(out, inputs)

    def fetch_outputs(self) -> tuple[Any, list[dict[str, Any]], dict[str, Any], float]:
        """Ask the runner where the last outputs lie: judge-owned copies of them, their
        descriptions, the report, and the report's time on the judge's clock."""
        from engine.grading.judge.wire import ProtocolError

        evaluation = self.evaluation
        assert evaluation.runner is not None
        report, fds, report_ms = evaluation.runner.timed(
            evaluation.report_message(), evaluation.deadline
        )
        try:
            if report.get("op") != "outputs":
                raise Rejected("runner.protocol", "the runner did not report its outputs")
            out, described = evaluation.transport.fetch(report.get("outputs"), fds)
        except ProtocolError as exc:
            raise Rejected("runner.protocol", f"unusable output description: {exc}") from exc
        finally:
            for fd in fds:
                os.close(fd)
        return out, described, report, report_ms

    def close(self) -> None:
        """The traces into the result; every runner closed (their output to our log)."""
        evaluation = self.evaluation
        traces = self.figures.traces
        if traces:
            self.result["call_trace"] = {side: t.summary() for side, t in traces.items()}
        if self.prepared is not None:
            self.prepared.reference.close()
        if evaluation.transport is not None:
            with contextlib.suppress(Exception):  # a broken CUDA context must not hide the verdict
                evaluation.transport.close()
        if evaluation.runner is not None and self.passed and self.keep_compiled is not None:
            keep_compiled(evaluation.runner, *self.keep_compiled)
        for proc in (evaluation.runner, self.spare):
            if proc is not None:
                tail = proc.log_tail()
                if tail:
                    sys.stderr.write("--- the runner's output (untrusted) ---\n" + tail + "\n")
                    sys.stderr.flush()
                proc.close()


def started_or_fresh(runner: RunnerProcess, options: RunnerOptions) -> RunnerProcess:
    """``runner``, or a fresh one where it came from a runner template and died before it
    was ready (on a GPU: its own CUDA start failed): the template's trouble is the grader's,
    and a fresh runner does not share it."""
    if runner.template_pid is None:
        return runner
    try:
        runner.wait_ready()
        return runner
    except (RunnerDied, RunnerTimeout):
        runner.close()
        return RunnerProcess.spawn(options)


def keep_compiled(runner: RunnerProcess, root: Path, key: str, secret: bytes) -> None:
    """Kill the runner's whole tree, wait until it is gone, then keep what its DSL caches
    wrote (a failure here costs the reuse, never the verdict)."""
    from engine.grading.judge import compile_cache

    if not runner.workdir:
        return
    folder = Path(runner.workdir) / compile_cache.RUNNER_DIR
    if folder.is_symlink() or not folder.is_dir() or not any(folder.iterdir()):
        return  # nothing compiled to keep: no reason to wait for the runner's end
    # a template's child: the template's tree less the template, killed until none runs (a
    # daemon reparented there included; the template's next fork waits for this judge's end)
    tree = runner.tree()
    deadline = _monotonic() + 2.0
    while True:
        runner.kill()
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        tree = [pid for pid in dict.fromkeys([*tree, *runner.tree()]) if _running(pid)]
        if not tree:
            break
        if _monotonic() > deadline:
            return  # something of the runner still runs: keep nothing
        time.sleep(0.01)
    with contextlib.suppress(Exception):
        compile_cache.harvest(root, key, folder, secret)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has stopped running)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def check_target(device_name: str, source: str) -> None:
    """Reject, before anything is timed, a solution whose ``ARCHS`` leave out this GPU's
    architecture (``problems/targets.py``); a file without ``ARCHS`` passes."""
    from problems.targets import target_for_device, undeclared_target

    gpu = target_for_device(device_name)
    why = undeclared_target(source, gpu) if gpu is not None else None
    if why:
        raise Rejected("target.undeclared_arch", why)
