"""What the judge concludes from each call's evidence and from the DSL: threads, launch
counts, the runner's figure; the speed of light; the kernel audit and the bypass test.
Mixed into :class:`engine.grading.judge.judge.Judge`."""

from __future__ import annotations

import math
import time
from typing import Any

from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.judge.rejections import Rejected

_monotonic = time.monotonic


class CallEvidence:
    """Checks on what a runner reports about a call (the judge's state is on ``self``)."""

    base_threads: int | None
    breakdown: CallBreakdown
    calls: int
    cuda: bool
    deadline: float
    gaps: list[float]
    job: dict[str, Any]
    judge_ms: list[float]
    launches: list[int]
    problem: Any
    result: dict[str, Any]
    runner: Any
    runner_ms: list[float]
    scale: str
    scored_judge_ms: float
    report_ms: float
    reports_ms: list[float]

    def flag(self, name: str) -> None:
        raise NotImplementedError

    def phase(self, name: str) -> None:
        raise NotImplementedError

    def timed(self, name: str, start: float) -> None:
        raise NotImplementedError

    def call(self, seed: int, timed: bool = False) -> tuple[Any, list[Any]]:
        raise NotImplementedError

    def check_anchor(self, out: Any, pristine: list[Any], kind: str, index: int) -> bool:
        raise NotImplementedError

    def check_evidence(self, reply: dict[str, Any], judge_ms: float, timed: bool) -> None:
        ms = reply.get("ms")
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise Rejected("runner.protocol", "the runner's timing figure is not a time")
        if timed:
            self.gaps.append(judge_ms - float(ms))
            self.judge_ms.append(self.scored_judge_ms)
            self.reports_ms.append(self.report_ms)
            self.runner_ms.append(float(ms))
            self.breakdown.add("submission", reply)
        threads = reply.get("threads")
        if (
            isinstance(threads, int)
            and self.base_threads is not None
            and threads > self.base_threads
        ):
            raise Rejected("guard.threads", "a thread started by the submission is still running")
        py_threads = reply.get("py_threads")
        base_py = self.runner.ready.get("py_threads") if self.runner is not None else None
        if isinstance(py_threads, int) and isinstance(base_py, int) and py_threads > base_py:
            raise Rejected(
                "guard.threads", "a Python thread the submission started is still running"
            )
        if self.job.get("dsl_checks"):
            launches = reply.get("launches")
            if type(launches) is not int or launches < 1:
                raise Rejected(
                    "dsl.no_launch", f"call {self.calls} launched no {self.job['dsl']} kernel"
                )
            self.launches.append(launches)

    def launch_evidence(self) -> None:
        """Launches per call, the kernel audit and the bypass call (DSL checks on)."""
        result = self.result
        if not self.job.get("dsl_checks"):
            result["bypass"] = "skipped: no GPU"
            result["dsl_launches_per_call"] = None
            return
        result["dsl_launches_per_call"] = sum(self.launches) / max(1, len(self.launches))
        self.audit_kernels()
        self.phase("bypass")
        start = time.monotonic()
        result["bypass"] = self.bypass_test()
        self.timed("bypass", start)
        if result["bypass"] == "still_valid":
            raise Rejected(
                "dsl.bypass_still_valid",
                "outputs still pass with the DSL "
                "launches skipped: the DSL kernels do not produce the outputs",
            )
        self.check_work_share()

    def speed_of_light(self) -> None:
        from problems.sol import hardware_for, sol_estimate

        hardware = hardware_for(str(self.result.get("device") or "")) if self.cuda else None
        if hardware is None:
            return
        sol_ms = sol_estimate(self.problem.cost(self.scale), hardware).seconds * 1e3
        self.result.update(sol_ms=sol_ms, sol_hardware=hardware.name)
        impl = self.result.get("impl_median_ms")
        if impl is not None and impl < sol_ms:
            self.flag("sol.faster_than_sol")

    def audit_kernels(self) -> None:
        from engine.grading.judge.kernel_audit import cross_check

        mode = self.job.get("kernel_audit", "report")
        if mode == "off":
            return
        assert self.runner is not None
        self.phase("kernel_audit")
        start = _monotonic()
        reply, _ = self.runner.request({"op": "audit"}, self.deadline)
        if reply.get("op") != "audited":
            raise Rejected("runner.protocol", "the runner answered the audit with junk")
        observed = reply.get("observed")
        compiled = [str(n)[:200] for n in (reply.get("compiled") or [])][:64]
        observed_names = (
            [str(n)[:200] for n in observed][:256] if isinstance(observed, list) else None
        )
        launches = _int(reply.get("launches"))
        durations = reply.get("observed_us")
        audit = cross_check(
            compiled,
            observed_names,
            bool(reply.get("control")),
            launches,
            durations[:256] if isinstance(durations, list) else None,
        )
        audit["mode"] = mode
        if isinstance(reply.get("threads"), int):  # the profiler's own threads are ours
            self.base_threads = max(self.base_threads or 0, reply["threads"])
        self.result["kernel_audit"] = audit
        if audit["status"] == "unconfirmed":
            self.flag("kernel_audit.unconfirmed")
        self.timed("kernel_audit", start)
        if audit["status"] == "unconfirmed" and mode == "enforce":
            raise Rejected(
                "dsl.launch_unconfirmed",
                f"{audit['hooked_launches']} {self.job['dsl']} launches were counted but the "
                "profiler saw none of the kernels the DSL compiled in this process",
            )
        if audit["status"] == "confirmed" and audit.get("work") is None:
            raise Rejected("runner.protocol", "the runner's kernel durations are not times")

    def check_work_share(self) -> None:
        """After the bypass test: the DSL kernels must have done most of the profiled work."""
        from engine.grading.judge.kernel_audit import MIN_DSL_SHARE, eager_work

        audit = self.result.get("kernel_audit")
        if audit is None or not eager_work(audit):
            return
        work = audit["work"]
        judged = work["dsl_us"] + work["other_us"]
        raise Rejected(
            "dsl.eager_work",
            f"the {self.job['dsl']} kernels took {work['dsl_share']:.0%} of the call's device "
            f"time ({work['dsl_us']:.0f} of {judged:.0f} µs, library GEMMs aside); at least "
            f"{MIN_DSL_SHARE:.0%} must be: the output is computed outside the DSL kernels",
        )

    def bypass_test(self) -> str:
        """The same call message with the launch hooks skipping: outputs must stop passing."""
        assert self.runner is not None
        seed = self.job["seeds"]["bypass"]
        self.runner.switch[0] = 1
        try:
            out, pristine = self.call(seed)
        except Rejected as exc:
            if exc.code in ("crash", "correctness.structure", "correctness.nan", "dsl.no_launch"):
                return "outputs_failed"
            raise
        finally:
            self.runner.switch[0] = 0
        return "still_valid" if self.check_anchor(out, pristine, "bypass", 0) else "outputs_failed"

    # -- the whole evaluation ---------------------------------------------------------------


def _int(value: Any) -> int:
    return value if type(value) is int else 0
