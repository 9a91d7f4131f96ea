"""Validate problem modules: anchoring, declarations, discrimination, mutants, determinism.

Run ``python -m problems.check [IDS...] [--device cpu|cuda] [--scale smoke|full] [--json]``;
with ``--gpu b200|h200|h100`` it reports instead each problem's memory need and SOL on that
grading GPU, from shapes (:mod:`problems.check_target`).
IDS are ids (``p28``), numbers, slugs, glob patterns or paths to problem files; none means
the whole catalog. Each problem gets named checks (see :data:`CHECK_NAMES`); the exit status
is 1 when any problem fails.

Checks (draws use seeds derived from the problem id; 3 draws by default, draws processed one
at a time so full-scale workloads fit in memory):

- ``declared_inputs``: make_inputs returns one value per INPUTS name, on the asked device.
- ``anchor_float64``: float outputs of the anchor are float64 with a non-zero median max|v − z|.
- ``declared_outputs``: a tensor for one OUTPUTS name, else a flat tuple of len(OUTPUTS);
  INPLACE outputs share their input's storage; other outputs alias no input; the reference
  modifies no undeclared input.
- ``discriminative``: allowance / max|z| ≤ 0.05 (bf16/fp16 outputs) or 1e-3 (fp32), worst draw.
- ``mutants``: zeros, echoed input, dropped_term, bf16 accumulation and another seed's output
  fail; the reference, its ``reordered`` variant and the rounded anchor pass (every draw).
- ``discrete_agree``: integer/bool/fp8 outputs of v and z are equal (20 draws smoke, 4 full).
- ``stable_error``: max/min of the relative reference error over draws ≤ 10×.
- ``deterministic``: the same seed gives identical inputs; the next seed gives other inputs.
- ``dtype_generic``: the anchor's output structure equals v's apart from float64 leaves.
- ``cost``: ``cost(w)`` is a :class:`~problems.spec.Cost` with positive bytes at both scales.

Optional module attribute understood here: ``EXACT_COPY_OUTPUTS`` — a tuple of output names
that are pure copies or casts of inputs (no arithmetic), exempt from the "non-zero reference
error" part of ``anchor_float64`` and from ``stable_error``.

The bf16-accumulation mutant (the reference with float32/float16 inputs cast to bfloat16 and
the compute floor lowered to bfloat16) must fail only where some non-copy float output is finer
than bfloat16 (float32, float16): at bfloat16 output precision, bfloat16 intermediates stay
within the 3-ulp floor of the rule (as in FlashAttention-style kernels) and the mutant is
reported as not applicable. On discrete-only problems a mutant equal to the reference's output
is reported as not applicable.

The checks live in :mod:`problems.check_rules` and :mod:`problems.check_mutants`, the draws in
:mod:`problems.check_draws`, the result types in :mod:`problems.check_report`; this module runs
them problem by problem and is the command line.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from problems.check_args import add_arguments
from problems.check_draws import Draw, discrete_indices, run_draw
from problems.check_isolated import check_in_children
from problems.check_mutants import MutantTally
from problems.check_report import (
    CHECK_NAMES,
    CheckOptions,
    CheckResult,
    ProblemReport,
    describe_error,
    format_report,
    seeds_for,
)
from problems.check_rules import (
    DISCRIMINATION_LIMITS,
    STABLE_ERROR_FACTOR,
    LeafStats,
    check_anchor,
    check_cost,
    check_declared_inputs,
    check_declared_outputs,
    check_deterministic,
    check_discrete,
    check_discriminative,
    check_dtype_generic,
    check_stable,
    discrete_disagreement,
    exact_copy_outputs,
    update_stats,
)
from problems.compare import clone_inputs, promote, reference_numerics
from problems.registry import Catalog, load_problem, problem_files
from problems.spec import Problem, ProblemFormatError

__all__ = [
    "CHECK_NAMES",
    "DISCRIMINATION_LIMITS",
    "STABLE_ERROR_FACTOR",
    "CheckOptions",
    "CheckResult",
    "ProblemReport",
    "Selection",
    "check_problem",
    "format_report",
    "main",
    "run_checks",
    "run_from_args",
    "seeds_for",
    "select",
]


# ---------------------------------------------------------------------------------------------
# timing (CUDA only)


def _time_calls(problem: Problem, inputs: Sequence[Any], calls: int, anchor: bool) -> float:
    """Median milliseconds of ``calls`` reference calls on fresh copies, with CUDA events."""
    times = []
    for _ in range(calls):
        args = clone_inputs(inputs)
        if anchor:
            args = promote(args)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with reference_numerics():
            start.record()
            problem.reference(*args)
            end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        del args
    return float(statistics.median(times))


# ---------------------------------------------------------------------------------------------
# a whole problem


def check_problem(problem: Problem, opts: CheckOptions | None = None) -> ProblemReport:
    """Run every check on one loaded problem."""
    opts = opts or CheckOptions()
    if opts.draws < 2:
        raise ValueError("at least 2 draws are needed (the other-seed mutant uses a second one)")
    started = time.perf_counter()
    report = ProblemReport(problem.id, problem.slug, str(problem.path))
    seeds = seeds_for(problem, opts.discrete_draw_count(), opts.seed)
    main_seeds, extra_seeds = seeds[: opts.draws], seeds[opts.draws :]
    checks, inputs_ok = _checks_before_draws(problem, main_seeds[0], opts)
    if not inputs_ok:
        return _finish(report, checks, started)

    # Draws are processed one at a time (full-scale workloads are large); each keeps only
    # summaries, and the previous draw's output for the other-seed mutant.
    summary = _DrawSummary(problem, *exact_copy_outputs(problem))
    failure = _run_main_draws(summary, main_seeds, opts)
    if failure is not None:
        done = {c.name for c in checks}
        checks.extend(CheckResult(n, False, failure) for n in CHECK_NAMES if n not in done)
        return _finish(report, checks, started)

    checks.extend(summary.results())
    try:
        checks.append(
            check_discrete(
                problem,
                summary.discrete_failure,
                len(main_seeds),
                summary.discrete_count,
                extra_seeds,
                opts,
            )
        )
    except Exception as exc:  # noqa: BLE001
        checks.append(CheckResult("discrete_agree", False, f"raised {describe_error(exc)}"))

    timing_inputs = summary.timing_inputs
    if opts.device.startswith("cuda") and torch.cuda.is_available() and timing_inputs:
        try:
            report.eager_ms = _time_calls(problem, timing_inputs, opts.timing_calls, anchor=False)
            report.anchor_ms = _time_calls(problem, timing_inputs, 1, anchor=True)
        except Exception as exc:  # noqa: BLE001
            checks.append(CheckResult("timing", False, f"raised {describe_error(exc)}"))
    return _finish(report, checks, started)


def _checks_before_draws(
    problem: Problem, seed: int, opts: CheckOptions
) -> tuple[list[CheckResult], bool]:
    """``cost``, ``declared_inputs`` and ``deterministic`` on the first seed's inputs.

    The flag is False when ``make_inputs`` raised: every other check then fails with that."""
    checks: list[CheckResult] = []
    try:
        checks.append(check_cost(problem))
    except Exception as exc:  # noqa: BLE001
        checks.append(CheckResult("cost", False, f"cost() raised {describe_error(exc)}"))

    try:
        first_inputs = problem.make_inputs(seed, opts.device, opts.scale)
    except Exception as exc:  # noqa: BLE001
        failed = f"make_inputs raised {describe_error(exc)}"
        checks.extend(CheckResult(n, False, failed) for n in CHECK_NAMES if n != "cost")
        return checks, False
    checks.append(check_declared_inputs(problem, first_inputs, opts.device))
    try:
        checks.append(check_deterministic(problem, seed, first_inputs, opts))
    except Exception as exc:  # noqa: BLE001
        message = f"make_inputs raised {describe_error(exc)}"
        checks.append(CheckResult("deterministic", False, message))
    del first_inputs
    return checks, True


@dataclass
class _DrawSummary:
    """What the main draws leave behind: per-draw results, reference-error statistics,
    mutant verdicts, the discrete outputs' first disagreement and the inputs to time."""

    problem: Problem
    exact: set[str]
    exact_error: str | None
    per_draw: dict[str, list[CheckResult]] = field(
        default_factory=lambda: {"declared_outputs": [], "dtype_generic": []}
    )
    stats: dict[int, LeafStats] = field(default_factory=dict)
    tally: MutantTally = field(init=False)
    discrete_failure: str | None = None
    discrete_count: int = 0
    previous_v: Any | None = None  # the last draw's output, for the other-seed mutant
    timing_inputs: list[Any] | None = None

    def __post_init__(self) -> None:
        self.tally = MutantTally(self.problem, self.exact)

    def add(self, d: Draw) -> None:
        """Check one draw and keep only its summaries."""
        self.per_draw["declared_outputs"].append(check_declared_outputs(self.problem, [d]))
        self.per_draw["dtype_generic"].append(check_dtype_generic([d]))
        update_stats(self.problem, self.stats, d)
        self.tally.add(d, self.previous_v)
        self.discrete_count = len(discrete_indices(d.v))
        self.discrete_failure = self.discrete_failure or discrete_disagreement(self.problem, d)
        self.previous_v = d.v
        if self.timing_inputs is None:
            self.timing_inputs = d.inputs

    def results(self) -> list[CheckResult]:
        """The checks decided by the main draws (the worst draw for per-draw checks)."""
        checks = [
            next((r for r in results if not r.passed), results[0])
            for results in self.per_draw.values()
        ]
        leaf_stats = list(self.stats.values())
        checks.append(check_anchor(leaf_stats, self.exact, self.exact_error))
        checks.append(check_discriminative(leaf_stats))
        checks.append(check_stable(leaf_stats, self.exact))
        checks.append(self.tally.result())
        return checks


def _run_main_draws(summary: _DrawSummary, seeds: Sequence[int], opts: CheckOptions) -> str | None:
    """Run and check the draws one at a time; the failure, when the reference raised."""
    seed = seeds[0]
    try:
        for seed in seeds:
            d = run_draw(summary.problem, seed, opts)
            summary.add(d)
            del d
    except Exception as exc:  # noqa: BLE001
        return f"reference failed on seed {seed}: {describe_error(exc)}"
    summary.previous_v = None
    return None


def _finish(report: ProblemReport, checks: list[CheckResult], started: float) -> ProblemReport:
    """Put the checks in :data:`CHECK_NAMES` order and stamp the time taken."""
    order = {n: i for i, n in enumerate(CHECK_NAMES)}
    report.checks = sorted(checks, key=lambda c: order.get(c.name, len(order)))
    report.seconds = time.perf_counter() - started
    return report


# ---------------------------------------------------------------------------------------------
# selecting and loading problems (load errors are reported, not raised)


@dataclass
class Selection:
    """The problems to check, and a failing report for each file that did not load."""

    problems: list[Problem]
    load_errors: list[ProblemReport]


def _error_report(path: Path, message: str) -> ProblemReport:
    stem = path.stem
    pid, _, slug = stem.partition("_")
    return ProblemReport(pid, slug, str(path), error=message)


def select(keys: Sequence[str] = (), family: str | None = None) -> Selection:
    """Load the catalog tolerantly and pick problems by ids/slugs/globs/paths.

    Raises :class:`KeyError` for a key that names no problem and no broken file.
    """
    loaded: list[Problem] = []
    errors: list[ProblemReport] = []
    path_keys = [k for k in keys if k.endswith(".py")]
    name_keys = [k for k in keys if not k.endswith(".py")]
    for path in [Path(k) for k in path_keys]:
        try:
            loaded.append(load_problem(path.resolve()))
        except ProblemFormatError as exc:
            errors.append(_error_report(path, str(exc)))
    if path_keys and not name_keys:
        return Selection(loaded, errors)

    catalog_ok: list[Problem] = []
    broken: list[tuple[Path, str]] = []
    for path in problem_files():
        try:
            catalog_ok.append(load_problem(path))
        except ProblemFormatError as exc:
            broken.append((path, str(exc)))
    try:
        catalog = Catalog(catalog_ok)
    except ProblemFormatError as exc:  # duplicate ids or slugs
        raise KeyError(str(exc)) from exc
    if not name_keys:
        whole = catalog.select(None, family)
        return Selection(loaded + whole, errors + [_error_report(p, m) for p, m in broken])

    chosen: list[Problem] = []
    for key in name_keys:
        norm = f"p{int(key):02d}" if key.strip().isdigit() else key.strip()
        hits = [
            (p, m)
            for p, m in broken
            if fnmatch.fnmatch(p.stem.partition("_")[0], norm)
            or fnmatch.fnmatch(p.stem.partition("_")[2], norm)
        ]
        try:
            chosen.extend(catalog.select([key], family))
        except KeyError:
            if not hits:
                raise
        errors.extend(_error_report(p, m) for p, m in hits)
    seen: set[str] = set()
    unique = [p for p in loaded + chosen if not (p.id in seen or seen.add(p.id))]  # type: ignore[func-returns-value]
    return Selection(unique, errors)


def run_checks(
    selection: Selection,
    opts: CheckOptions,
    progress: Callable[[ProblemReport], None] | None = None,
    isolate: bool = False,
    jobs: int = 1,
) -> list[ProblemReport]:
    """Check every selected problem; load errors come first, then problems in id order.
    With ``isolate`` each problem runs in a child process of its own, ``jobs`` at a time."""
    reports = list(selection.load_errors)
    for report in reports:
        if progress:
            progress(report)
    ordered = sorted(selection.problems, key=lambda p: p.number)
    if isolate:
        return reports + check_in_children(ordered, opts, jobs, progress)
    for problem in ordered:
        try:
            report = check_problem(problem, opts)
        except Exception as exc:  # noqa: BLE001 - one broken problem must not stop the rest
            report = ProblemReport(
                problem.id, problem.slug, str(problem.path), error=describe_error(exc)
            )
        reports.append(report)
        if progress:
            progress(report)
        # a problem's tensors may sit in reference cycles (tracebacks, closures): collect
        # them before the next problem allocates (p38's float64 anchor needs ~60 GB alone)
        gc.collect()
        if opts.device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.empty_cache()
    return reports


def options_from_args(args: argparse.Namespace) -> CheckOptions:
    if args.draws < 2:
        raise ValueError("--draws must be at least 2")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for but no CUDA device is available")
    if not (args.device == "cpu" or args.device.startswith("cuda")):
        raise ValueError(f"unknown device {args.device!r} (use cpu or cuda)")
    return CheckOptions(
        device=args.device,
        scale=args.scale,
        draws=args.draws,
        discrete_draws=args.discrete_draws,
        seed=args.seed,
    )


def run_target_check(args: argparse.Namespace) -> int:
    """``--gpu``: memory need and SOL per problem on one grading GPU (exit 1: one does not fit)."""
    from problems.check_target import check_target, format_row, summary
    from problems.targets import target

    gpu = target(args.gpu)
    selection = select(args.ids, args.family)
    for report in selection.load_errors:
        print(format_report(report), flush=True)

    def progress(row: Any) -> None:
        if not args.json:
            print(format_row(row), flush=True)

    rows = check_target(selection.problems, gpu, args.scale, progress)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print(summary(rows, gpu, args.scale))
    bad = selection.load_errors or any(r.fits is False for r in rows)
    return 1 if bad else 0


def run_from_args(args: argparse.Namespace) -> int:
    """Select, check and print; returns the exit status (0 all pass, 1 any failure)."""
    if getattr(args, "gpu", None):
        return run_target_check(args)
    opts = options_from_args(args)
    selection = select(args.ids, args.family)

    def progress(report: ProblemReport) -> None:
        if not args.json:
            print(format_report(report), flush=True)

    # on a GPU each problem gets a fresh process (memory left by one cannot starve the next);
    # --jobs runs several such children at once, on any device
    if args.jobs < 1:
        raise ValueError("--jobs must be at least 1")
    isolate = (opts.device.startswith("cuda") or args.jobs > 1) and not args.in_process
    isolate = isolate and len(selection.problems) > 1
    reports = run_checks(selection, opts, progress, isolate=isolate, jobs=args.jobs)
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
    else:
        failed = sum(not r.passed for r in reports)
        passed = len(reports) - failed
        print(f"{passed}/{len(reports)} problems passed ({opts.scale}, {opts.device})")
    return 0 if reports and all(r.passed for r in reports) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m problems.check", description="Validate problem modules."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except (KeyError, ValueError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
