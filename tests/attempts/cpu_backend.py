"""A small real grading backend for tests: CPU correctness preview via problems.compare."""

from __future__ import annotations

import asyncio
import importlib.util
import random
import sys
import tempfile
import traceback
from pathlib import Path

from engine.grading.api import Feedback, GradeRequest
from problems import compare, registry


def _grade(request: GradeRequest, draws: int) -> Feedback:
    problem = registry.get(request.problem_id)
    base = Feedback(
        verdict="preview",
        request_id=request.request_id,
        problem_id=request.problem_id,
        dsl=request.dsl,
        device="cpu (preview)",
        impl_median_ms=1.0,  # a stand-in's time: a preview carries one (engine/grading/admission)
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "submission.py"
        path.write_text(request.source)
        name = f"mkb_test_submission_{random.getrandbits(32)}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            solve = module.solve
        except Exception:  # noqa: BLE001
            base.verdict, base.reason, base.import_ok = "fail", "import", False
            base.import_error = traceback.format_exc(limit=2)
            return base
        finally:
            sys.modules.pop(name, None)
    base.import_ok = True
    for _ in range(draws):
        inputs = problem.module.make_inputs(random.getrandbits(48), "cpu", problem.smoke)
        with compare.reference_numerics():
            v = problem.module.reference(*compare.clone_inputs(inputs))
            z = problem.module.reference(*compare.promote(compare.clone_inputs(inputs)))
        try:
            u = solve(*compare.clone_inputs(inputs))
        except Exception as exc:  # noqa: BLE001
            base.verdict, base.reason, base.message = "fail", "runtime", repr(exc)
            return base
        ok, structure, leaves = compare.check_outputs(u, v, z)
        detail = structure or "; ".join(c.detail for c in leaves if not c.passed)
        base.draws.append({"passed": ok, "detail": detail})
        if not ok:
            base.verdict, base.reason, base.message = "fail", "correctness.tolerance", detail
            return base
    return base


class CpuPreviewBackend:
    """Grades on the CPU with the smoke workload; can inject infrastructure failures.

    ``fail_first`` submission gradings and ``fail_final`` final gradings fail first (verdict
    "error"); ``raise_final`` makes final gradings raise instead; ``submission_delay_s``
    stalls every submission grading (a slow grader queue).
    """

    name = "cpu-test"

    def __init__(
        self,
        draws: int = 2,
        fail_first: int = 0,
        fail_final: int = 0,
        raise_final: int = 0,
        submission_delay_s: float = 0.0,
    ) -> None:
        self.submission_delay_s = submission_delay_s
        self.draws = draws
        self.fail_first = fail_first
        self.fail_final = fail_final
        self.raise_final = raise_final
        self.requests: list[GradeRequest] = []

    async def grade(self, request: GradeRequest) -> Feedback:
        self.requests.append(request)
        if request.purpose == "final" and self.raise_final > 0:
            self.raise_final -= 1
            raise ConnectionError("injected grader crash")
        if request.purpose == "final" and self.fail_final > 0:
            self.fail_final -= 1
            return Feedback(verdict="error", reason="infra.test", message="injected failure")
        if request.purpose == "submission" and self.submission_delay_s:
            await asyncio.sleep(self.submission_delay_s)
        if request.purpose == "submission" and self.fail_first > 0:
            self.fail_first -= 1
            return Feedback(verdict="error", reason="infra.test", message="injected failure")
        return await asyncio.to_thread(_grade, request, self.draws)

    async def close(self) -> None:
        return None
