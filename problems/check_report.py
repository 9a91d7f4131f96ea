"""What the problem validator reports and how hard it checks: results, options, seeds.

Plain data shared by the checks (:mod:`problems.check_rules`, :mod:`problems.check_mutants`)
and the runner (:mod:`problems.check`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from problems.spec import Problem

CHECK_NAMES: tuple[str, ...] = (
    "declared_inputs",
    "anchor_float64",
    "declared_outputs",
    "discriminative",
    "mutants",
    "discrete_agree",
    "stable_error",
    "deterministic",
    "dtype_generic",
    "cost",
)


@dataclass
class CheckResult:
    """One named check of one problem."""

    name: str
    passed: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class ProblemReport:
    """All checks of one problem (or the load error that prevented them)."""

    id: str
    slug: str
    path: str
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    eager_ms: float | None = None
    anchor_ms: float | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "slug": self.slug,
            "passed": self.passed,
            "checks": [c.as_dict() for c in self.checks],
            "seconds": round(self.seconds, 3),
        }
        if self.error is not None:
            data["error"] = self.error
        if self.eager_ms is not None or self.anchor_ms is not None:
            data["eager_ms"] = self.eager_ms
            data["anchor_ms"] = self.anchor_ms
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: str) -> ProblemReport:
        """A report read back from :meth:`as_dict` (which leaves the path out)."""
        return cls(
            id=str(data["id"]),
            slug=str(data["slug"]),
            path=path,
            checks=[
                CheckResult(str(c["name"]), bool(c["passed"]), str(c.get("detail", "")))
                for c in data.get("checks", [])
            ],
            seconds=float(data.get("seconds", 0.0)),
            error=data.get("error"),
            eager_ms=data.get("eager_ms"),
            anchor_ms=data.get("anchor_ms"),
        )


@dataclass(frozen=True)
class CheckOptions:
    """How hard to check: device, scale and number of draws."""

    device: str = "cpu"
    scale: str = "smoke"
    draws: int = 3
    discrete_draws: int | None = None  # default: 20 at smoke scale, 4 at full scale
    seed: int | None = None  # base seed; default derived from the problem id
    timing_calls: int = 5

    def discrete_draw_count(self) -> int:
        if self.discrete_draws is not None:
            return max(self.discrete_draws, self.draws)
        return max(20 if self.scale == "smoke" else 4, self.draws)


def seeds_for(problem: Problem, count: int, base: int | None = None) -> list[int]:
    """Reproducible seeds for a problem: derived from its id unless ``base`` is given."""
    start = base if base is not None else (zlib.crc32(problem.id.encode()) % 1_000_003) * 1009
    return [start + 7919 * i for i in range(count)]


def describe_error(exc: BaseException) -> str:
    """The exception's type and first line, at most 300 characters."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


def format_report(report: ProblemReport) -> str:
    """One line per problem, then one indented line per failing check."""
    status = "PASS" if report.passed else "FAIL"
    line = f"{report.id:<4} {status}  {report.slug:<60} {report.seconds:6.2f}s"
    if report.eager_ms is not None:
        line += f"  eager {report.eager_ms:.3f} ms"
    if report.anchor_ms is not None:
        line += f"  anchor {report.anchor_ms:.3f} ms"
    lines = [line]
    if report.error:
        lines.append(f"       load: {report.error}")
    for c in report.failures():
        lines.append(f"       {c.name}: {c.detail}")
    return "\n".join(lines)
