"""Instant simulated agents and graders, for scale benchmarks and scheduler tests.

They go through the real scheduler, recording backend and store; only the agent's work and
the GPU evaluation are replaced by deterministic arithmetic on a hash of the attempt, so
results are reproducible and exercise pass, fail, rescue, break and skipped transfers.

For the noise analysis (docs/analysis.md) the grader can add log-normal runtime noise with a
coefficient of variation per problem (``[grading] noise_cv = { p28 = 0.03 }``), drawn from a
hash of the seed, the source and the request id (so each repeat of a file draws afresh, and a
resumed run draws what the uninterrupted one would), and a source may name its true runtime
(``# sim: runtime_ms=1.25``), which the simulated agent writes when asked
(``[agent] final_runtime_ms``, ``skill_runtime_factor``).

For the calibration benchmark (``benchmarks/noise_calibration_engine.py``) its slots can sit on
named simulated hosts with a known speed and noise of their own (``hosts``, ``host_speed``,
``host_noise``), the noise can differ by DSL (``dsl_cv``), a share of gradings can be outliers
(``outlier_rate`` × ``outlier_factor``), and ``scatter`` places each grading on a slot drawn
from its request id whatever slot it names (a pool that hands gradings to whichever grader is
free and does not honour paired jobs' slots).
Each is also a ``[grading]`` key of ``grading = "simulated"`` (``engine/grading_table.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.attempts.spec import AttemptOutcome, AttemptSpec
from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.grading.backends.slot_pool import SlotPool, wanted_label
from engine.grading.machine import machine_name


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


_RUNTIME = re.compile(r"^# sim: runtime_ms=([0-9.eE+-]+)$", re.MULTILINE)
_NORMAL = statistics.NormalDist()


@dataclass
class SimulatedBackend:
    """Grades instantly: the verdict and runtime derive from the source text (and the noise
    from the seed, the source and the request id)."""

    name: str = "simulated"
    delay_s: float = 0.0
    preview: bool = True
    noise_cv: dict[str, float] = field(default_factory=dict)  # problem id (or default) → CV
    seed: int = 0
    call_log: str | None = None  # a file: one JSON line as each grading starts and ends
    # grading slots like the local backend's (0: none, the feedback names no slot): each
    # grading holds one ("hostname:sim<i>"), honouring a request's ``slot``
    slots: int = 0
    hosts: tuple[str, ...] = ()  # slot i is on hosts[i % len(hosts)] (default: this machine)
    host_speed: dict[str, float] = field(default_factory=dict)  # host → runtime factor
    host_noise: dict[str, float] = field(default_factory=dict)  # host → factor on the CV
    dsl_cv: dict[str, float] = field(default_factory=dict)  # DSL → CV (over ``noise_cv``)
    outlier_rate: float = 0.0  # share of gradings that run ``outlier_factor`` × slower
    outlier_factor: float = 2.0
    scatter: bool = False  # each grading on a slot drawn from its request id, not its ``slot``
    _pool: SlotPool[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.hosts = tuple(self.hosts)  # a config file gives a list

    def _log(self, event: str, request: GradeRequest) -> None:
        if self.call_log is None:
            return
        line = {
            "event": event,
            "request_id": request.request_id,
            "t": time.time(),
            "source": hashlib.sha256(request.source.encode()).hexdigest()[:16],
        }
        with open(self.call_log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")

    def noise(self, request: GradeRequest, host: str = "") -> float:
        """The runtime's log-normal factor: exp(σ·z), σ² = ln(1 + CV²), z from a hash; the CV
        is the DSL's (``dsl_cv``), else the problem's, times the host's ``host_noise``."""
        cv = self.noise_cv.get(request.problem_id, self.noise_cv.get("default", 0.0))
        cv = self.dsl_cv.get(request.dsl, cv) * self.host_noise.get(host, 1.0)
        if cv <= 0:
            return 1.0
        u = min(
            max(_unit(self.seed, request.source, request.request_id, "noise"), 1e-12), 1 - 1e-12
        )
        return math.exp(math.sqrt(math.log1p(cv * cv)) * _NORMAL.inv_cdf(u))

    def host_of(self, label: str) -> str:
        """The simulated host of slot ``label`` (``sim<i>``)."""
        if not self.hosts:
            return machine_name()
        return self.hosts[int(label.removeprefix("sim")) % len(self.hosts)]

    def _wanted(self, request: GradeRequest) -> str:
        """The label of the slot a request names (``host:label``), "" for any."""
        if self.scatter:
            return f"sim{int(_unit(self.seed, request.request_id, 'slot') * self.slots)}"
        if not self.hosts:
            return wanted_label(request.slot)
        machine, _, label = request.slot.partition(":")
        ours = label in {f"sim{i}" for i in range(self.slots)}
        return label if ours and machine == self.host_of(label) else ""

    async def grade(self, request: GradeRequest) -> Feedback:
        if self.slots <= 0:
            return await self._logged(request, "")
        if self._pool is None:
            self._pool = SlotPool([f"sim{i}" for i in range(self.slots)], str)
        label = await self._pool.acquire(self._wanted(request))
        try:
            host = self.host_of(label)
            feedback = await self._logged(request, host)
            feedback.host = f"{host}:{label}"
            return feedback
        finally:
            self._pool.release(label)

    async def _logged(self, request: GradeRequest, host: str) -> Feedback:
        self._log("start", request)
        try:
            return await self._grade(request, host)
        finally:
            self._log("end", request)

    def _factor(self, request: GradeRequest, host: str) -> float:
        """The host's speed, the noise and any outlier, as one factor on the true runtime."""
        factor = self.host_speed.get(host, 1.0) * self.noise(request, host)
        if self.outlier_rate > 0:
            u = _unit(self.seed, request.source, request.request_id, "outlier")
            factor *= self.outlier_factor if u < self.outlier_rate else 1.0
        return factor

    async def _grade(self, request: GradeRequest, host: str = "") -> Feedback:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        named = _RUNTIME.search(request.source)
        u = _unit(request.source)
        passed = "FAIL" not in request.source and (named is not None or u < 0.8)
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
        impl = float(named.group(1)) if named else 0.2 + 1.6 * _unit(request.source, "t")
        impl *= self._factor(request, host)
        return Feedback(
            verdict="preview" if self.preview else "pass",
            request_id=request.request_id,
            problem_id=request.problem_id,
            dsl=request.dsl,
            device="simulated (preview)" if self.preview else "simulated",
            impl_median_ms=impl,
            eager_median_ms=eager,
            speedup=min(eager / impl, 100.0),
        )

    async def close(self) -> None:
        return None


@dataclass
class SimulatedRunner:
    """An instant agent: ``submissions`` feedback rounds, a skill, a final implementation.

    With ``final_runtime_ms`` its finals name their true runtime: that for solo arms, times
    ``skill_runtime_factor`` (one number, or per problem id) for skill-conditioned arms.
    With ``finals_from`` (a folder) every final is that folder's ``{problem}_{dsl}.py``, e.g.
    ``problems/solutions``: an experiment of the reference solutions, graded for real by the
    configured backend (``experiments/solutions.toml``; a bundle of it re-grades them elsewhere).
    """

    submissions: int = 10
    blank_skill_rate: float = 0.1
    delay_s: float = 0.0
    final_runtime_ms: float | None = None
    skill_runtime_factor: float | dict[str, float] = 1.0
    finals_from: str | None = None

    def __post_init__(self) -> None:
        if self.finals_from is not None and not Path(self.finals_from).is_dir():
            raise ValueError(f"[agent] finals_from: {self.finals_from!r} is not a folder")

    def _final_source(self, base: str, node: Any, skill_seed: str) -> str:
        if self.finals_from is not None:
            path = Path(self.finals_from) / f"{node.problem_id}_{node.dsl}.py"
            if not path.is_file():
                raise ValueError(f"[agent] finals_from: no {path.name} in {self.finals_from}")
            return path.read_text()
        if self.final_runtime_ms is None:
            return f"# {base} final {skill_seed[:16]}\n"
        factor = self.skill_runtime_factor
        if isinstance(factor, dict):
            factor = factor.get(node.problem_id, 1.0)
        runtime = self.final_runtime_ms * (factor if node.is_treatment else 1.0)
        return f"# {base} final\n# sim: runtime_ms={runtime!r}\n"

    async def __call__(
        self, spec: AttemptSpec, backend: GradingBackend, observer: object
    ) -> AttemptOutcome:
        node = spec.node
        assert node is not None, "the simulated agent runs planned attempts"
        base = f"{node.model}|{node.problem_id}|{node.replicate}|{node.arm}|{node.variant}"
        used = 0
        while used < min(self.submissions, spec.max_submissions):  # an extend raises the limit
            used += 1
            n = used
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            await spec.retry.grade(
                backend,
                GradeRequest(
                    node.problem_id, node.dsl, f"# {base} submission {n}\n", purpose="submission"
                ),
            )
        final_source = self._final_source(base, node, spec.source_skill or "")
        final = await spec.retry.grade(
            backend,
            GradeRequest(
                node.problem_id,
                node.dsl,
                final_source,
                purpose="final",
                request_id=f"{spec.attempt_id}-final",
            ),
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
