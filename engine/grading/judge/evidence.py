"""What the judge concludes from each call's evidence and from the DSL: threads, launch
counts, the runner's figure; the speed of light; the kernel audit and the bypass test."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from engine.grading.judge.output_checks import Draw
from engine.grading.judge.state import CallFigures, Evaluation
from engine.grading.verdict import Rejected

_monotonic = time.monotonic
BYPASS_FAILURES = ("crash", "correctness.structure", "correctness.nan", "dsl.no_launch")


class CallEvidence:
    """Checks on what a runner reports about a call, on one evaluation's figures. ``call``
    runs one call of the submission (the bypass test repeats one with the DSL launches
    skipped) and ``check_anchor`` judges its outputs against the float64 anchor."""

    def __init__(
        self,
        evaluation: Evaluation,
        figures: CallFigures,
        call: Callable[[int], Draw],
        check_anchor: Callable[[Draw, str, int], bool],
    ) -> None:
        self.evaluation = evaluation
        self.figures = figures
        self.call = call
        self.check_anchor = check_anchor

    def check_evidence(
        self, reply: dict[str, Any], judge_ms: float, report_ms: float, timed: bool
    ) -> None:
        """One call's ``done`` reply: a time, no thread left running, DSL launches counted.
        ``judge_ms``: the judge's clock on the call; ``report_ms``: on its outputs' report."""
        evaluation, figures = self.evaluation, self.figures
        ms = reply.get("ms")
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise Rejected("runner.protocol", "the runner's timing figure is not a time")
        if timed:
            figures.gaps.append(judge_ms - float(ms))
            # the score's clock runs from releasing the call until the outputs are described:
            # work a patched runner does after "done" (in its report, a signal handler) counts
            figures.judge_ms.append(judge_ms + report_ms)
            figures.reports_ms.append(report_ms)
            figures.runner_ms.append(float(ms))
            figures.breakdown.add("submission", reply)
        threads = reply.get("threads")
        base = figures.base_threads
        if isinstance(threads, int) and base is not None and threads > base:
            raise Rejected("guard.threads", "a thread started by the submission is still running")
        py_threads = reply.get("py_threads")
        runner = evaluation.runner
        base_py = runner.ready.get("py_threads") if runner is not None else None
        if isinstance(py_threads, int) and isinstance(base_py, int) and py_threads > base_py:
            raise Rejected(
                "guard.threads", "a Python thread the submission started is still running"
            )
        if evaluation.job.get("dsl_checks"):
            launches = reply.get("launches")
            if type(launches) is not int or launches < 1:
                dsl = evaluation.job["dsl"]
                raise Rejected("dsl.no_launch", f"call {figures.calls} launched no {dsl} kernel")
            figures.launches.append(launches)

    def launch_evidence(self) -> None:
        """Launches per call, the kernel audit and the bypass call (DSL checks on)."""
        evaluation, launches = self.evaluation, self.figures.launches
        result = evaluation.result
        if not evaluation.job.get("dsl_checks"):
            result["bypass"] = "skipped: no GPU"
            result["dsl_launches_per_call"] = None
            return
        result["dsl_launches_per_call"] = sum(launches) / max(1, len(launches))
        self.audit_kernels()
        evaluation.phase("bypass")
        start = _monotonic()
        result["bypass"] = self.bypass_test()
        evaluation.timed("bypass", start)
        if result["bypass"] == "still_valid":
            raise Rejected(
                "dsl.bypass_still_valid",
                "outputs still pass with the DSL "
                "launches skipped: the DSL kernels do not produce the outputs",
            )
        self.check_work_share()

    def speed_of_light(self) -> None:
        """The problem's speed of light on this GPU; a result faster than it is flagged."""
        from problems.sol import hardware_for, sol_estimate

        evaluation = self.evaluation
        result = evaluation.result
        device = str(result.get("device") or "")
        hardware = hardware_for(device) if evaluation.cuda else None
        if hardware is None:
            return
        sol_ms = sol_estimate(evaluation.problem.cost(evaluation.scale), hardware).seconds * 1e3
        result.update(sol_ms=sol_ms, sol_hardware=hardware.name)
        impl = result.get("impl_median_ms")
        if impl is not None and impl < sol_ms:
            evaluation.flag("sol.faster_than_sol")

    def audit_kernels(self) -> None:
        """The profiler's kernel names against the ones the DSL compiled (EvalConfig
        .kernel_audit: ``off``, ``report`` or ``enforce``)."""
        from engine.grading.judge.kernel_audit import cross_check

        evaluation = self.evaluation
        mode = evaluation.job.get("kernel_audit", "report")
        if mode == "off":
            return
        assert evaluation.runner is not None
        evaluation.phase("kernel_audit")
        start = _monotonic()
        reply, _ = evaluation.runner.request({"op": "audit"}, evaluation.deadline)
        if reply.get("op") != "audited":
            raise Rejected("runner.protocol", "the runner answered the audit with junk")
        observed = reply.get("observed")
        compiled = [str(n)[:200] for n in (reply.get("compiled") or [])][:64]
        observed_names = (
            [str(n)[:200] for n in observed][:256] if isinstance(observed, list) else None
        )
        durations = reply.get("observed_us")
        audit = cross_check(
            compiled,
            observed_names,
            bool(reply.get("control")),
            _int(reply.get("launches")),
            durations[:256] if isinstance(durations, list) else None,
        )
        audit["mode"] = mode
        if isinstance(reply.get("threads"), int):  # the profiler's own threads are ours
            self.figures.base_threads = max(self.figures.base_threads or 0, reply["threads"])
        evaluation.result["kernel_audit"] = audit
        if audit["status"] == "unconfirmed":
            evaluation.flag("kernel_audit.unconfirmed")
        evaluation.timed("kernel_audit", start)
        if audit["status"] == "unconfirmed" and mode == "enforce":
            raise Rejected(
                "dsl.launch_unconfirmed",
                f"{audit['hooked_launches']} {evaluation.job['dsl']} launches were counted but "
                "the profiler saw none of the kernels the DSL compiled in this process",
            )
        if audit["status"] == "confirmed" and audit.get("work") is None:
            raise Rejected("runner.protocol", "the runner's kernel durations are not times")

    def check_work_share(self) -> None:
        """After the bypass test: the DSL kernels must have done most of the profiled work."""
        from engine.grading.judge.kernel_audit import MIN_DSL_SHARE, eager_work

        audit = self.evaluation.result.get("kernel_audit")
        if audit is None or not eager_work(audit):
            return
        work = audit["work"]
        judged = work["dsl_us"] + work["other_us"]
        raise Rejected(
            "dsl.eager_work",
            f"the {self.evaluation.job['dsl']} kernels took {work['dsl_share']:.0%} of the "
            f"call's device time ({work['dsl_us']:.0f} of {judged:.0f} µs, library GEMMs "
            f"aside); at least {MIN_DSL_SHARE:.0%} must be: the output is computed outside "
            "the DSL kernels",
        )

    def bypass_test(self) -> str:
        """The same call message with the launch hooks skipping: outputs must stop passing."""
        runner = self.evaluation.runner
        assert runner is not None
        seed = self.evaluation.job["seeds"]["bypass"]
        runner.switch[0] = 1
        try:
            draw = self.call(seed)
        except Rejected as exc:
            if exc.code in BYPASS_FAILURES:
                return "outputs_failed"
            raise
        finally:
            runner.switch[0] = 0
        return "still_valid" if self.check_anchor(draw, "bypass", 0) else "outputs_failed"


def _int(value: Any) -> int:
    return value if type(value) is int else 0
