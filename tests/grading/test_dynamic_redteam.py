"""The dynamic red-team set (fixtures/dynamic): attacks that get past the static rules and must
be stopped by the judge's dynamic checks, graded here in the CPU preview.

Each file declares ``# expect:`` (what the judge must answer on a GPU) and ``# class:`` (the
behaviour class, a-n), optionally ``# expect-cpu:`` (what the CPU preview must answer where it
differs; ``preview`` means the preview cannot see the attack) and ``# pass-if-speedup-within:
X`` (an attack that can only forge timing, or caches that never hit, may pass at most X times
as fast as the honest block alone). Many of these get through the in-process grader of
today: they specify the two-process judge, they are not a regression suite for the old one.
``benchmarks/redteam_gpu.py`` runs the same files on a GPU around a real DSL kernel.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.redteam_gpu import (
    GOOD_OUTCOMES,
    HONEST_BEGIN,
    HONEST_END,
    PREVIEW,
    SOLUTIONS,
    THROUGH,
    Case,
    all_cases,
    baseline_source,
    classify,
    part,
    read_case,
    splice_honest,
)
from engine.grading.rules.static import check_source, first_reason

CASES = all_cases()
CLASSES = "abcdefghijklmn"
# The two-process judge's stable reason codes (rule.* codes: engine/grading/rules/static.py).
JUDGE_REASONS = {
    "correctness.tolerance",
    "correctness.recheck",
    "correctness.nan",
    "correctness.structure",
    "correctness.input_mutated",
    "correctness.aliasing",
    "timing.mismatch",
    "timing.deferred_work",
    "guard.threads",
    "runner.protocol",
    "crash",
    "timeout",
    "memory",
    "import.failed",
    "dsl.no_launch",
    "dsl.bypass_still_valid",
    "dsl.eager_work",
}


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
    return names


def outside_honest_block(source: str) -> str:
    """The fixture's source without its honest block (the attack code only)."""
    lines = source.splitlines(keepends=True)
    begin = next(i for i, line in enumerate(lines) if line.rstrip() == HONEST_BEGIN)
    end = next(i for i, line in enumerate(lines) if line.rstrip() == HONEST_END)
    return "".join(lines[:begin] + lines[end + 1 :])


def is_static_case(case: Case) -> bool:
    return all(reason.startswith("rule.") for reason in case.expected)


def test_every_file_declares_its_expectation_class_and_honest_block() -> None:
    assert 25 <= len(CASES) <= 45
    assert check_source(baseline_source(CASES[0].path.read_text())) == []
    for case in CASES:
        source = case.path.read_text()
        assert case.expected, f"{case.name}: no # expect:"
        assert case.behaviour in CLASSES, f"{case.name}: # class: must be one of a-n"
        for reason in case.expected + case.expected_cpu:
            known = reason in JUDGE_REASONS or reason.startswith("rule.")
            assert known or (reason == PREVIEW and reason in case.expected_cpu), (case.name, reason)
        assert PREVIEW not in case.expected, f"{case.name}: preview only in # expect-cpu:"
        tree = ast.parse(source)
        assert ast.get_docstring(tree), f"{case.name}: a docstring must say the attack"
        assert [line for line in source.splitlines() if line == HONEST_BEGIN] == [HONEST_BEGIN]
        assert [line for line in source.splitlines() if line == HONEST_END] == [HONEST_END]
        defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert defined.count("honest_solve") == 1 and "solve" in defined, case.name
        assert "def honest_solve(hidden_states, residual, weight):" in source, case.name


def test_every_behaviour_class_has_a_case() -> None:
    assert {case.behaviour for case in CASES} == set(CLASSES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_attack_gets_past_the_static_rules(case: Case) -> None:
    findings = check_source(case.path.read_text())
    if is_static_case(case):
        assert first_reason(findings) in case.expected, findings
    else:
        assert findings == [], [(f.code, f.line, f.message) for f in findings]


@pytest.fixture(scope="module")
def honest_speedup(grade) -> float:
    """The honest block alone, graded the same way: the speed timing attacks are held to."""
    feedback = grade(baseline_source(CASES[0].path.read_text()))
    assert feedback.verdict == PREVIEW and feedback.speedup, (feedback.reason, feedback.message)
    return float(feedback.speedup)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dynamic_attack_is_rejected(grade, request: pytest.FixtureRequest, case: Case) -> None:
    feedback = grade(case.path.read_text(), case.problem)
    baseline = None
    if case.speedup_within is not None and feedback.verdict == PREVIEW:
        baseline = request.getfixturevalue("honest_speedup")
    outcome = classify(
        case,
        "cpu",
        feedback.verdict,
        feedback.reason,
        feedback.speedup,
        baseline,
        feedback.flags or (),
    )
    if outcome == THROUGH and baseline is not None:
        # held to a speed measured once per module: on a loaded 2-core host that one reading
        # can be slow (n2 and c2 each failed so once). Measure the honest block again now, next
        # to the case, and hold the case to the faster of the two readings.
        again = grade(baseline_source(CASES[0].path.read_text()))
        if again.verdict == PREVIEW and again.speedup:
            baseline = max(baseline, float(again.speedup))
            outcome = classify(
                case,
                "cpu",
                feedback.verdict,
                feedback.reason,
                feedback.speedup,
                baseline,
                feedback.flags or (),
            )
    assert outcome in GOOD_OUTCOMES, (
        outcome,
        feedback.verdict,
        feedback.reason,
        feedback.message,
        feedback.speedup,
        baseline,
    )


@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_splice_puts_the_dsl_solution_in_place_of_the_honest_block(dsl: str) -> None:
    fixture = read_case(Path(__file__).parent / "fixtures" / "dynamic" / "d05_exact_first_5.py")
    solution = (SOLUTIONS / f"p28_{dsl}.py").read_text()
    spliced = splice_honest(fixture.path.read_text(), solution)
    tree = ast.parse(spliced)
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions.count("honest_solve") == 1
    assert functions.count("solve") == 1
    assert ast.get_docstring(tree) == ast.get_docstring(ast.parse(fixture.path.read_text()))
    futures = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    assert futures and tree.body.index(futures[0]) == 1  # right after the docstring
    assert HONEST_BEGIN in spliced and HONEST_END in spliced
    assert "_add_rmsnorm" in spliced  # the DSL kernel replaced the plain-torch block
    assert "inv = torch.rsqrt(s.pow(2)" not in spliced
    assert spliced.startswith("# expect:")  # header lines stay first


@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_every_case_splices_cleanly_without_name_clashes(dsl: str) -> None:
    solution = (SOLUTIONS / f"p28_{dsl}.py").read_text()
    solution_names = top_level_names(ast.parse(solution)) - {"solve", "torch", "annotations"}
    for case in CASES:
        source = case.path.read_text()
        spliced = splice_honest(source, solution)
        ast.parse(spliced)
        clashes = top_level_names(ast.parse(outside_honest_block(source))) & solution_names
        assert not clashes, f"{case.name} redefines the solution's {sorted(clashes)}"
        if not is_static_case(case):
            assert check_source(spliced) == [], case.name


def test_splice_rejects_a_file_without_markers() -> None:
    with pytest.raises(ValueError, match="marker"):
        splice_honest("def solve(x):\n    return x\n", "def solve(x):\n    return x\n")


def test_a_flagged_or_floored_clock_in_the_preview_counts_as_caught() -> None:
    """The CPU preview flags a mismatched clock instead of failing, and replaces a figure
    under the judge's floor by the floor; on a loaded host the floor can still sit far below
    the honest time (the loaded full suite once let c2 'through' at 2.5x the honest speed)."""
    from benchmarks.redteam_gpu import CAUGHT, THROUGH

    case = Case(Path("c9_clock.py"), "c", ("timing.mismatch",), ("timing.mismatch",), "p28", 1.0)
    fast = dict(verdict="preview", reason=None, speedup=0.46, honest_speedup=0.18)
    assert classify(case, "cpu", **fast) == THROUGH
    assert classify(case, "cpu", **fast, flags=["timing.judge_floor"]) == CAUGHT
    assert classify(case, "cpu", **fast, flags=["timing.mismatch"]) == CAUGHT
    other = Case(Path("n9_cache.py"), "n", ("correctness.recheck",), ("correctness.recheck",))
    assert classify(other, "cpu", **fast, flags=["timing.judge_floor"]) == THROUGH


def test_the_gpu_run_splits_the_cases_into_slices_that_cover_each_once() -> None:
    halves = part(CASES, "1/2") + part(CASES, "2/2")
    assert [c.name for c in halves] == [c.name for c in CASES]
    thirds = [part(CASES, f"{k}/3") for k in (1, 2, 3)]
    assert sum(len(t) for t in thirds) == len(CASES) and all(thirds)
    with pytest.raises(SystemExit, match="K/N"):
        part(CASES, "half")
    with pytest.raises(SystemExit, match="within"):
        part(CASES, "3/2")
