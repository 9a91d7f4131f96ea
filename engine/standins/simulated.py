"""Instant simulated agents and graders, for scale benchmarks and scheduler tests.

They go through the real scheduler, recording backend and store; only the agent's work and
the GPU evaluation are replaced by deterministic arithmetic on a hash of the attempt, so
results are reproducible and exercise pass, fail, rescue, break and skipped transfers.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass

from engine.attempts.spec import AttemptOutcome, AttemptSpec
from engine.grading.api import Feedback, GradeRequest, GradingBackend


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class SimulatedBackend:
    """Grades instantly: the verdict and runtime derive from the source text."""

    name: str = "simulated"
    delay_s: float = 0.0
    preview: bool = True

    async def grade(self, request: GradeRequest) -> Feedback:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        u = _unit(request.source)
        passed = "FAIL" not in request.source and u < 0.8
        if not passed:
            return Feedback(
                verdict="fail",
                reason="correctness.tolerance",
                request_id=request.request_id,
                problem_id=request.problem_id,
                dsl=request.dsl,
                message="max error exceeds allowance",
            )
        eager = 1.0
        impl = 0.2 + 1.6 * _unit(request.source, "t")
        return Feedback(
            verdict="preview" if self.preview else "pass",
            request_id=request.request_id,
            problem_id=request.problem_id,
            dsl=request.dsl,
            impl_median_ms=impl,
            eager_median_ms=eager,
            speedup=min(eager / impl, 100.0),
        )

    async def close(self) -> None:
        return None


@dataclass
class SimulatedRunner:
    """An instant agent: ``submissions`` feedback rounds, a skill, a final implementation."""

    submissions: int = 10
    blank_skill_rate: float = 0.1
    delay_s: float = 0.0

    async def __call__(
        self, spec: AttemptSpec, backend: GradingBackend, observer: object
    ) -> AttemptOutcome:
        node = spec.node
        assert node is not None, "the simulated agent runs planned attempts"
        base = f"{node.model}|{node.problem_id}|{node.replicate}|{node.arm}|{node.variant}"
        used = min(self.submissions, spec.max_submissions)
        for n in range(1, used + 1):
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            await spec.retry.grade(
                backend,
                GradeRequest(
                    node.problem_id, node.dsl, f"# {base} submission {n}\n", purpose="submission"
                ),
            )
        skill_seed = spec.source_skill or ""
        final_source = f"# {base} final {skill_seed[:16]}\n"
        final = await spec.retry.grade(
            backend, GradeRequest(node.problem_id, node.dsl, final_source, purpose="final")
        )
        blank = _unit(base, "skill") < self.blank_skill_rate
        skill = "" if blank else f"Skill from {base}: fuse the pass; measured {final.speedup}."
        return AttemptOutcome(
            spec.attempt_id,
            "finished",
            final_feedback=final,
            skill=skill,
            final_source=final_source,
            submissions_used=used,
            input_tokens=1000,
            output_tokens=200,
            agent_seconds=0.0,
        )
