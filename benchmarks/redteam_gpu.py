"""Grade the dynamic red-team set through the real local backend and report what got through.

    PYTHONPATH=. python3 benchmarks/redteam_gpu.py --out DIR [--device cuda|cpu] [--dsl cute]
        [--timeout S] [FILES...]

Every file of ``tests/grading/fixtures/dynamic`` (or FILES) is one attack on p28 wrapped
around an honest computation between the lines ``# --- honest begin ---`` and
``# --- honest end ---``. On ``--device cuda`` that block is replaced by the real DSL
solution ``problems/solutions/p28_<dsl>.py`` with its ``solve`` renamed ``honest_solve``, so
every attack runs around a genuine DSL kernel (real launch counting and bypass); on
``--device cpu`` the plain-torch block is graded as it is, in the CPU preview.

Header lines of a case: ``# expect: a|b`` (what the judge must answer on a GPU),
``# expect-cpu:`` (in the CPU preview, where it differs; ``preview`` = the preview cannot see
the attack), ``# class:`` (a-n) and ``# pass-if-speedup-within: X`` (timing attacks whose
honest work is graded: if the runner gives them no grip, a pass is right as long as its speedup
is at most X times that of the honest block alone, graded first as a baseline).

Writes ``DIR/redteam.jsonl`` (one line per case: case, class, expected, verdict, reason,
message, speedup, elapsed_s, outcome, as_expected) and ``DIR/redteam_summary.json``, prints the
summary, and exits 1 if any case got through (was not rejected) or errored.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.backends.local import LocalBackend  # noqa: E402
from engine.grading.options import EvalConfig  # noqa: E402

DYNAMIC = REPO / "tests" / "grading" / "fixtures" / "dynamic"
SOLUTIONS = REPO / "problems" / "solutions"
HONEST_BEGIN = "# --- honest begin ---"
HONEST_END = "# --- honest end ---"
PREVIEW = "preview"  # in an expectation: the CPU preview cannot see this attack
CPU_MEMORY_LIMIT_MB = 4096


@dataclass(frozen=True)
class Case:
    """One red-team file and what the judge must answer."""

    path: Path
    behaviour: str  # the class letter, a-n
    expected: tuple[str, ...]  # on a GPU
    expected_cpu: tuple[str, ...]  # in the CPU preview (``# expect-cpu:``, else ``expected``)
    problem: str = "p28"
    speedup_within: float | None = None  # a pass at most this × the honest speedup is fine

    @property
    def name(self) -> str:
        return self.path.stem

    def expected_on(self, device: str) -> tuple[str, ...]:
        return self.expected_cpu if device == "cpu" else self.expected


def read_case(path: Path) -> Case:
    """The ``# expect:``, ``# expect-cpu:``, ``# class:`` and ``# problem:`` header lines."""
    headers: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep:
            headers[key.strip()] = value.strip()

    def split(value: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in value.split("|") if part.strip())

    expected = split(headers.get("expect", ""))
    return Case(
        path=path,
        behaviour=headers.get("class", ""),
        expected=expected,
        expected_cpu=split(headers["expect-cpu"]) if "expect-cpu" in headers else expected,
        problem=headers.get("problem", "p28"),
        speedup_within=(
            float(headers["pass-if-speedup-within"])
            if "pass-if-speedup-within" in headers
            else None
        ),
    )


def all_cases() -> list[Case]:
    return [read_case(p) for p in sorted(DYNAMIC.glob("*.py"))]


def splice_honest(fixture_source: str, solution_source: str) -> str:
    """The fixture with its honest block replaced by ``solution_source`` (``solve`` renamed).

    The marker lines stay; ``def solve(`` becomes ``def honest_solve(`` by plain text
    substitution; the solution's ``from __future__`` imports move to the top of the file
    (after the module docstring), where Python requires them. The fixture keeps its own
    imports, so both sets end up in the file.
    """
    lines = fixture_source.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == HONEST_BEGIN]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == HONEST_END]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError("the fixture needs exactly one honest begin/end marker pair, in order")
    solution = solution_source.replace("def solve(", "def honest_solve(")
    if solution.count("def honest_solve(") != 1:
        raise ValueError("the solution must define solve() exactly once")
    futures: list[str] = []
    body: list[str] = []
    for line in solution.splitlines(keepends=True):
        (futures if line.startswith("from __future__ import") else body).append(line)
    if body and not body[-1].endswith("\n"):
        body[-1] += "\n"
    spliced = lines[: begins[0] + 1] + ["\n"] + body + ["\n\n"] + lines[ends[0] :]
    if futures:
        tree = ast.parse(fixture_source)
        first = tree.body[0] if tree.body else None
        has_docstring = (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        )
        at = (first.end_lineno or 0) if has_docstring and first is not None else 0
        spliced[at:at] = ["\n", *futures]
    return "".join(spliced)


def source_for(case: Case, device: str, dsl: str) -> str:
    source = case.path.read_text()
    if device != "cuda":
        return source
    solution = SOLUTIONS / f"{case.problem}_{dsl}.py"
    return splice_honest(source, solution.read_text())


# Outcomes of one case: the first three are what the judge must achieve.
CAUGHT = "caught"  # rejected with an expected reason
NEUTRALISED = "neutralised"  # a timing attack without grip, passed at the honest speed
PREVIEW_EXPECTED = "preview_expected"  # the CPU preview cannot see this attack
OTHER_REASON = "caught_other_reason"  # rejected, but not for an expected reason
THROUGH = "got_through"  # passed (or previewed) when it should not have
ERRORED = "errored"  # an infrastructure error instead of a verdict
GOOD_OUTCOMES = (CAUGHT, NEUTRALISED, PREVIEW_EXPECTED)


# timings of two gradings differ by noise: more on a shared CPU (preview) than on a GPU
NOISE_MARGIN = {"cpu": 1.5, "cuda": 1.1}


def classify(
    case: Case,
    device: str,
    verdict: str,
    reason: str | None,
    speedup: float | None,
    honest_speedup: float | None,
    flags: tuple[str, ...] | list[str] = (),
) -> str:
    """What one grading of ``case`` means for the red team."""
    expected = case.expected_on(device)
    if verdict == "fail":
        return CAUGHT if reason in expected else OTHER_REASON
    if verdict == "error":
        return ERRORED
    if (
        verdict == PREVIEW
        and "timing.mismatch" in expected
        and set(flags) & {"timing.mismatch", "timing.judge_floor"}
    ):
        # the CPU preview records a clock that disagrees with the judge's instead of failing
        # (a loaded host preempts honest runners too), and never scores: a forged figure
        # that was flagged, or replaced by the judge's floor, did not get through
        return CAUGHT
    if PREVIEW in expected and verdict == PREVIEW:
        return PREVIEW_EXPECTED
    if (
        case.speedup_within is not None
        and speedup is not None
        and honest_speedup is not None
        and speedup <= case.speedup_within * honest_speedup * NOISE_MARGIN[device]
    ):
        return NEUTRALISED
    return THROUGH


def verdict_row(
    case: Case, device: str, feedback: Any, elapsed_s: float, honest_speedup: float | None
) -> dict[str, Any]:
    """One JSON line: what came back and what it means."""
    outcome = classify(
        case,
        device,
        feedback.verdict,
        feedback.reason,
        feedback.speedup,
        honest_speedup,
        feedback.flags or (),
    )
    return {
        "case": case.name,
        "class": case.behaviour,
        "expected": "|".join(case.expected_on(device)),
        "verdict": feedback.verdict,
        "reason": feedback.reason,
        "message": (feedback.message or "")[:500],
        "speedup": feedback.speedup,
        "elapsed_s": round(elapsed_s, 2),
        "outcome": outcome,
        "as_expected": outcome in GOOD_OUTCOMES,
    }


def summarize(
    rows: list[dict[str, Any]], device: str, honest_speedup: float | None
) -> dict[str, Any]:
    """caught/total, and the cases that got through, errored or failed for another reason."""
    caught = [r for r in rows if r["outcome"] in GOOD_OUTCOMES]
    return {
        "device": device,
        "honest_speedup": honest_speedup,
        "caught": len(caught),
        "total": len(rows),
        "caught/total": f"{len(caught)}/{len(rows)}",
        "got_through": [r["case"] for r in rows if r["outcome"] == THROUGH],
        "errored": [r["case"] for r in rows if r["outcome"] == ERRORED],
        "neutralised": [r["case"] for r in rows if r["outcome"] == NEUTRALISED],
        "other_reason": [
            {"case": r["case"], "expected": r["expected"], "reason": r["reason"]}
            for r in rows
            if r["outcome"] == OTHER_REASON
        ],
    }


def honest_block(source: str) -> str:
    """The lines from ``# --- honest begin ---`` to ``# --- honest end ---``, inclusive."""
    lines = source.splitlines(keepends=True)
    begin = next(i for i, line in enumerate(lines) if line.rstrip("\r\n") == HONEST_BEGIN)
    end = next(i for i, line in enumerate(lines) if line.rstrip("\r\n") == HONEST_END)
    return "".join(lines[begin : end + 1])


def baseline_source(fixture_source: str) -> str:
    """A submission that is only the honest block (the speed the timing attacks are held to)."""
    return (
        '"""The honest block alone."""\n\nimport torch\n\n\n'
        + honest_block(fixture_source)
        + "\n\ndef solve(hidden_states, residual, weight):\n"
        + "    return honest_solve(hidden_states, residual, weight)\n"
    )


def make_backend(device: str, timeout_s: float) -> LocalBackend:
    if device == "cuda":
        return LocalBackend(gpus="auto", config=EvalConfig(timeout_s=timeout_s))
    config = EvalConfig(timeout_s=timeout_s, memory_limit_mb=CPU_MEMORY_LIMIT_MB)
    return LocalBackend(gpus=None, preview_slots=1, config=config, preload_dsls=False)


async def grade_source(
    backend: LocalBackend, case: Case, source: str, device: str, dsl: str
) -> tuple[Any, float]:
    request = GradeRequest(case.problem, dsl, source, device=device, request_id=case.name)
    start = time.perf_counter()
    feedback = await backend.grade(request)
    return feedback, time.perf_counter() - start


async def run(out_dir: Path, device: str, dsl: str, timeout_s: float, cases: list[Case]) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    backend = make_backend(device, timeout_s)
    if device == "cuda" and backend.device != "cuda":
        raise SystemExit("--device cuda: no GPU visible to this process")
    await backend.start()
    rows: list[dict[str, Any]] = []
    honest_speedup: float | None = None
    try:
        if any(case.speedup_within is not None for case in cases):
            first = cases[0]
            source = baseline_source(first.path.read_text())
            if device == "cuda":
                solution = (SOLUTIONS / f"{first.problem}_{dsl}.py").read_text()
                source = splice_honest(source, solution)
            feedback, _ = await grade_source(backend, first, source, device, dsl)
            honest_speedup = feedback.speedup
            print(json.dumps({"honest_baseline": feedback.verdict, "speedup": honest_speedup}))
        with (out_dir / "redteam.jsonl").open("w") as log:
            for case in cases:
                source = source_for(case, device, dsl)
                feedback, elapsed = await grade_source(backend, case, source, device, dsl)
                row = verdict_row(case, device, feedback, elapsed, honest_speedup)
                rows.append(row)
                log.write(json.dumps(row, default=str) + "\n")
                log.flush()
                print(json.dumps(row, default=str), flush=True)
    finally:
        await backend.close()
    summary = summarize(rows, device, honest_speedup)
    (out_dir / "redteam_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 1 if summary["got_through"] or summary["errored"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/redteam_gpu.py", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dsl", choices=("cute", "tirx"), default="cute")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per evaluation after eager timing"
    )
    parser.add_argument(
        "--part",
        default="1/1",
        help="K/N: the K-th of N equal slices of the cases (the whole set no longer fits one "
        "10-minute device call: ~10-15 s per case through a warm grader)",
    )
    parser.add_argument("files", nargs="*", type=Path, help="red-team files (default: all)")
    args = parser.parse_args(argv)
    cases = [read_case(p) for p in args.files] if args.files else all_cases()
    return asyncio.run(run(args.out, args.device, args.dsl, args.timeout, part(cases, args.part)))


def part(cases: list[Case], spec: str) -> list[Case]:
    """The ``K/N`` slice of ``cases`` (in order; the slices cover every case once)."""
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SystemExit(f"--part must be K/N, not {spec!r}") from None
    if not 1 <= k <= n:
        raise SystemExit(f"--part {spec}: K must be within 1..N")
    size = -(-len(cases) // n)
    return cases[(k - 1) * size : k * size]


if __name__ == "__main__":
    sys.exit(main())
