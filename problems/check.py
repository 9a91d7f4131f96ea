"""Validate problem modules: anchoring, declarations, discrimination, mutants, determinism.

Run ``python -m problems.check [IDS...] [--device cpu|cuda] [--scale smoke|full] [--json]``.
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
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from problems import mutants
from problems.check_args import add_arguments
from problems.compare import (
    allowance_for,
    bit_pattern,
    check_outputs,
    clone_inputs,
    is_discrete,
    leaves,
    promote,
    reference_numerics,
)
from problems.registry import Catalog, load_problem, problem_files
from problems.spec import Cost, Problem, ProblemFormatError

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
#: allowance / max|z| must not exceed this, per output dtype.
DISCRIMINATION_LIMITS: dict[torch.dtype, float] = {
    torch.bfloat16: 0.05,
    torch.float16: 0.05,
    torch.float32: 1e-3,
}
#: Largest allowed ratio between the largest and smallest relative reference error
#: (max|v − z| / max|z|) over the draws, per float output.
STABLE_ERROR_FACTOR = 10.0


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


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


# ---------------------------------------------------------------------------------------------
# one draw: inputs, eager reference v and anchor z


@dataclass
class Draw:
    seed: int
    inputs: list[Any]
    v: Any
    z: Any
    v_inputs: list[Any]  # the (cloned) inputs the eager reference ran on, after the call


def _run_draw(problem: Problem, seed: int, opts: CheckOptions) -> Draw:
    inputs = problem.make_inputs(seed, opts.device, opts.scale)
    v_inputs = clone_inputs(inputs)
    with reference_numerics():
        v = problem.reference(*v_inputs)
        z = problem.reference(*promote(clone_inputs(inputs)))
    return Draw(seed, inputs, v, z, v_inputs)


def _leaf_names(problem: Problem, v: Any) -> list[str]:
    items = leaves(v)
    if len(items) == len(problem.outputs):
        return list(problem.outputs)
    return [f"output[{i}]" for i in range(len(items))]


def _float_indices(v: Any) -> list[int]:
    return [i for i, x in enumerate(leaves(v)) if mutants.is_float_leaf(x)]


def _discrete_indices(v: Any) -> list[int]:
    return [
        i for i, x in enumerate(leaves(v)) if isinstance(x, torch.Tensor) and is_discrete(x.dtype)
    ]


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _tensor_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return bool(torch.equal(bit_pattern(a), bit_pattern(b)))
    return bool(torch.equal(a, b))


def _inputs_equal(a: Sequence[Any], b: Sequence[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.device != y.device or not _tensor_equal(x, y):
                return False
        elif isinstance(x, (list, tuple)):
            if not _inputs_equal(list(x), list(y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# individual checks


def _check_declared_inputs(problem: Problem, inputs: Sequence[Any], device: str) -> CheckResult:
    if len(inputs) != len(problem.inputs):
        return CheckResult(
            "declared_inputs",
            False,
            f"make_inputs returned {len(inputs)} values for {len(problem.inputs)} INPUTS",
        )
    want = torch.device(device)
    for name, x in zip(problem.inputs, inputs):
        if isinstance(x, torch.Tensor) and x.device.type != want.type:
            return CheckResult(
                "declared_inputs", False, f"input {name!r} is on {x.device}, asked for {want}"
            )
    return CheckResult("declared_inputs", True, f"{len(inputs)} inputs on {want.type}")


def _check_declared_outputs(problem: Problem, draws: Sequence[Draw]) -> CheckResult:
    name = "declared_outputs"
    inplace = problem.inplace_input_indices()
    for d in draws:
        v = d.v
        if len(problem.outputs) == 1:
            if not isinstance(v, torch.Tensor):
                return CheckResult(
                    name, False, f"one declared output but reference returned {type(v).__name__}"
                )
            items = [v]
        else:
            if not isinstance(v, tuple) or len(v) != len(problem.outputs):
                got = f"{type(v).__name__}" + (
                    f" of {len(v)}" if isinstance(v, (tuple, list)) else ""
                )
                return CheckResult(
                    name,
                    False,
                    f"expected a tuple of {len(problem.outputs)} outputs "
                    f"{problem.outputs}, got {got}",
                )
            items = list(v)
            nested = [n for n, x in zip(problem.outputs, items) if isinstance(x, (tuple, list))]
            if nested:
                return CheckResult(name, False, f"outputs {nested} are nested containers")
        for out_i, in_i in inplace.items():
            out, inp = items[out_i], d.v_inputs[in_i]
            if not (
                isinstance(out, torch.Tensor)
                and isinstance(inp, torch.Tensor)
                and _same_storage(out, inp)
            ):
                return CheckResult(
                    name,
                    False,
                    f"in-place output {problem.outputs[out_i]!r} is not the storage of input "
                    f"{problem.inputs[in_i]!r}",
                )
        declared_inputs = set(inplace.values())
        for out_i, out in enumerate(items):
            if not isinstance(out, torch.Tensor) or out_i in inplace:
                continue
            for in_i, inp in enumerate(d.v_inputs):
                if isinstance(inp, torch.Tensor) and _same_storage(out, inp):
                    return CheckResult(
                        name,
                        False,
                        f"output {problem.outputs[out_i]!r} aliases input "
                        f"{problem.inputs[in_i]!r} without an INPLACE declaration",
                    )
        for in_i, (before, after) in enumerate(zip(d.inputs, d.v_inputs)):
            if in_i in declared_inputs or not isinstance(before, torch.Tensor):
                continue
            if not _tensor_equal(before, after):
                return CheckResult(
                    name,
                    False,
                    f"reference modified input {problem.inputs[in_i]!r}, "
                    "which is not declared in INPLACE",
                )
    kinds = ", ".join(
        f"{n}:{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
        if isinstance(x, torch.Tensor)
        else f"{n}:{type(x).__name__}"
        for n, x in zip(problem.outputs, leaves(draws[0].v))
    )
    return CheckResult(name, True, kinds)


def _exact_copy_outputs(problem: Problem) -> tuple[set[str], str | None]:
    names = getattr(problem.module, "EXACT_COPY_OUTPUTS", ())
    if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
        return set(), "EXACT_COPY_OUTPUTS must be a tuple of output names"
    unknown = [n for n in names if n not in problem.outputs]
    if unknown:
        return set(), f"EXACT_COPY_OUTPUTS names unknown outputs {unknown}"
    return set(names), None


@dataclass
class LeafStats:
    """Reference-error statistics of one float output over the draws."""

    name: str
    dtype: torch.dtype
    ref_errors: list[float] = field(default_factory=list)
    max_abs: list[float] = field(default_factory=list)
    allowances: list[float] = field(default_factory=list)
    anchor_dtypes: set[torch.dtype] = field(default_factory=set)
    error: str | None = None

    def relative_errors(self) -> list[float]:
        return [e / m if m > 0 else math.inf for e, m in zip(self.ref_errors, self.max_abs)]


def _update_stats(problem: Problem, stats: dict[int, LeafStats], d: Draw) -> None:
    """Add one draw's reference error of every float output to ``stats`` (index → stats)."""
    vl, zl = leaves(d.v), leaves(d.z)
    if not stats:
        names = _leaf_names(problem, d.v)
        stats.update({i: LeafStats(names[i], vl[i].dtype) for i in _float_indices(d.v)})
    for i, s in stats.items():
        if i >= len(zl) or not isinstance(zl[i], torch.Tensor) or i >= len(vl):
            s.error = "anchor output missing or not a tensor"
            continue
        s.anchor_dtypes.add(zl[i].dtype)
        if zl[i].shape != vl[i].shape:
            s.error = f"anchor shape {tuple(zl[i].shape)} != {tuple(vl[i].shape)}"
            continue
        try:
            allowance, ref_err, max_z = allowance_for(vl[i], zl[i])
        except ValueError as exc:
            s.error = str(exc)
            continue
        s.ref_errors.append(ref_err)
        s.max_abs.append(max_z)
        s.allowances.append(allowance)


def _check_anchor(
    stats: Sequence[LeafStats], exact: set[str], exact_error: str | None
) -> CheckResult:
    name = "anchor_float64"
    if exact_error:
        return CheckResult(name, False, exact_error)
    if not stats:
        return CheckResult(name, True, "no float outputs")
    details = []
    for s in stats:
        if s.error:
            return CheckResult(name, False, f"{s.name}: {s.error}")
        if s.anchor_dtypes != {torch.float64}:
            got = sorted(str(d).removeprefix("torch.") for d in s.anchor_dtypes)
            return CheckResult(
                name, False, f"{s.name}: anchor dtype {got}, expected float64 (hard-coded dtype?)"
            )
        median = statistics.median(s.ref_errors)
        if s.name in exact:
            details.append(f"{s.name}: exact copy")
        elif not median > 0:
            return CheckResult(
                name,
                False,
                f"{s.name}: reference error max|v−z| is 0 (median over draws); the anchor does "
                "not compute in float64, or declare the output in EXACT_COPY_OUTPUTS",
            )
        else:
            details.append(f"{s.name}: max|v−z| {median:.2e}")
    return CheckResult(name, True, "; ".join(details))


def _check_discriminative(stats: Sequence[LeafStats]) -> CheckResult:
    name = "discriminative"
    details = []
    for s in stats:
        limit = DISCRIMINATION_LIMITS.get(s.dtype)
        if limit is None or s.error or not s.allowances:
            continue
        ratios = [a / m if m > 0 else math.inf for a, m in zip(s.allowances, s.max_abs)]
        worst = max(ratios)
        if worst > limit:
            reason = (
                "the anchor is all zero"
                if math.isinf(worst)
                else f"allowance/max|z| = {worst:.2e} > {limit:g}"
            )
            return CheckResult(name, False, f"{s.name}: {reason}")
        details.append(f"{s.name}: {worst:.1e} ≤ {limit:g}")
    return CheckResult(name, True, "; ".join(details) or "no float outputs")


def _check_stable(stats: Sequence[LeafStats], exact: set[str]) -> CheckResult:
    name = "stable_error"
    details = []
    for s in stats:
        if s.name in exact or s.error or len(s.ref_errors) < 2:
            continue
        rel = s.relative_errors()
        lo, hi = min(rel), max(rel)
        if hi == 0:
            continue  # anchor_float64 reports a zero reference error
        if lo == 0 or hi / lo > STABLE_ERROR_FACTOR:
            spread = "∞" if lo == 0 else f"{hi / lo:.1f}×"
            return CheckResult(
                name,
                False,
                f"{s.name}: relative reference error varies {spread} across draws "
                f"({lo:.2e} … {hi:.2e}; limit {STABLE_ERROR_FACTOR:g}×)",
            )
        details.append(f"{s.name}: {hi / lo:.1f}×")
    return CheckResult(name, True, "; ".join(details) or "no float outputs with arithmetic")


def _check_dtype_generic(draws: Sequence[Draw]) -> CheckResult:
    name = "dtype_generic"
    for d in draws:
        vl, zl = leaves(d.v), leaves(d.z)
        if type(d.v) is not type(d.z) or len(vl) != len(zl):
            return CheckResult(name, False, "anchor output structure differs from the reference's")
        for i, (a, b) in enumerate(zip(vl, zl)):
            if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
                return CheckResult(name, False, f"output[{i}]: tensor vs non-tensor")
            if not isinstance(a, torch.Tensor):
                continue
            if a.shape != b.shape or a.device != b.device:
                return CheckResult(
                    name,
                    False,
                    f"output[{i}]: anchor {tuple(b.shape)} on {b.device}, "
                    f"reference {tuple(a.shape)} on {a.device}",
                )
            float_pair = mutants.is_float_leaf(a) and b.dtype == torch.float64
            if a.dtype != b.dtype and not float_pair:
                return CheckResult(
                    name, False, f"output[{i}]: anchor dtype {b.dtype}, reference {a.dtype}"
                )
    return CheckResult(name, True, "anchor structure matches")


def _check_deterministic(
    problem: Problem, seed: int, first: Sequence[Any], opts: CheckOptions
) -> CheckResult:
    name = "deterministic"
    again = problem.make_inputs(seed, opts.device, opts.scale)
    same = _inputs_equal(first, again)
    del again
    if not same:
        return CheckResult(name, False, f"make_inputs({seed}) gave different inputs twice")
    other = problem.make_inputs(seed + 1, opts.device, opts.scale)
    if _inputs_equal(first, other):
        return CheckResult(name, False, f"make_inputs({seed}) and ({seed + 1}) are identical")
    return CheckResult(name, True, "same seed → same inputs; new seed → new inputs")


def _discrete_disagreement(problem: Problem, d: Draw) -> str | None:
    """The first discrete output where the reference and the anchor differ, or None."""
    vl, zl = leaves(d.v), leaves(d.z)
    names = _leaf_names(problem, d.v)
    for i in _discrete_indices(d.v):
        a = vl[i]
        b = zl[i] if i < len(zl) else None
        if not isinstance(b, torch.Tensor) or b.dtype != a.dtype or b.shape != a.shape:
            return f"{names[i]}: anchor is not a {a.dtype} tensor of shape {tuple(a.shape)}"
        if not _tensor_equal(a, b):
            diff = (bit_pattern(a) != bit_pattern(b)) if a.dtype.is_floating_point else (a != b)
            return f"{names[i]}: {int(diff.sum())} elements differ (seed {d.seed})"
    return None


def _check_discrete(
    problem: Problem,
    first_failure: str | None,
    checked: int,
    discrete_count: int,
    extra_seeds: Sequence[int],
    opts: CheckOptions,
) -> CheckResult:
    """Finish ``discrete_agree``: the main draws gave ``first_failure``; run the extra draws."""
    name = "discrete_agree"
    if not discrete_count:
        return CheckResult(name, True, "no discrete outputs")
    if first_failure:
        return CheckResult(name, False, first_failure)
    for seed in extra_seeds:
        d = _run_draw(problem, seed, opts)
        found = _discrete_disagreement(problem, d)
        del d
        if found:
            return CheckResult(name, False, found)
        checked += 1
    return CheckResult(name, True, f"{discrete_count} discrete outputs agree over {checked} draws")


def _finer_than_bf16(dtype: torch.dtype) -> bool:
    return torch.finfo(dtype).eps < torch.finfo(torch.bfloat16).eps


class MutantTally:
    """Runs the mutants draw by draw and remembers which were rejected or accepted."""

    def __init__(self, problem: Problem, exact: set[str]) -> None:
        self.problem = problem
        self.exact = exact
        self.problems_found: list[str] = []
        self.not_applicable: set[str] = set()
        self.rejected: set[str] = set()
        self.accepted: set[str] = set()

    @staticmethod
    def _verdict(v: Any, z: Any, u: Any) -> tuple[bool, str]:
        try:
            ok, structure, results = check_outputs(u, v, z)
        except ValueError as exc:  # the eager reference overflowed: a generator bug
            return False, str(exc)
        if structure:
            return False, structure
        return ok, next((r.detail for r in results if not r.passed), "")

    def _must_fail(self, label: str, d: Draw, make: Callable[[], Any], discrete_only: bool) -> None:
        try:
            u = make()
        except Exception as exc:  # noqa: BLE001 - a crashing mutant is a broken problem
            self.problems_found.append(f"{label} raised {_describe(exc)}")
            return
        if u is None or (discrete_only and mutants.outputs_equal(u, d.v)):
            self.not_applicable.add(label)
            return
        ok, _ = self._verdict(d.v, d.z, u)
        if ok:
            self.problems_found.append(f"{label} passed but must fail")
        else:
            self.rejected.add(label)

    def _must_pass(self, label: str, d: Draw, make: Callable[[], Any]) -> None:
        try:
            u = make()
        except Exception as exc:  # noqa: BLE001
            self.problems_found.append(f"{label} raised {_describe(exc)}")
            return
        ok, reason = self._verdict(d.v, d.z, u)
        if ok:
            self.accepted.add(label)
        else:
            self.problems_found.append(f"{label} must pass: {reason}")

    def add(self, d: Draw, other_v: Any | None) -> None:
        """Run every mutant on draw ``d``; ``other_v`` is the reference output of another seed."""
        problem, inputs = self.problem, d.inputs
        float_idx = _float_indices(d.v)
        names = _leaf_names(problem, d.v)
        discrete_only = not float_idx
        self._must_pass("reference", d, lambda: d.v)
        self._must_pass("rounded_anchor", d, lambda: mutants.rounded_anchor(d.z, d.v))
        reordered = problem.reordered
        if reordered is not None:

            def run_reordered() -> Any:
                with reference_numerics():
                    return reordered(*clone_inputs(inputs))

            self._must_pass("reordered", d, run_reordered)
        for i in float_idx:
            self._must_fail(
                f"zeros[{names[i]}]", d, functools.partial(mutants.zeroed, d.v, i), discrete_only
            )
        self._must_fail("echoed_input", d, lambda: mutants.echoed_input(d.v, inputs), discrete_only)

        def run_dropped() -> Any:
            with reference_numerics():
                return problem.dropped_term(*clone_inputs(inputs))

        self._must_fail("dropped_term", d, run_dropped, discrete_only)
        leaf_values = leaves(d.v)
        bf16_applicable = any(
            names[i] not in self.exact and _finer_than_bf16(leaf_values[i].dtype) for i in float_idx
        )
        if bf16_applicable or discrete_only:
            self._must_fail(
                "bf16_accumulation",
                d,
                lambda: mutants.bf16_accumulation(problem.reference, inputs, d.v),
                discrete_only,
            )
        else:
            self.not_applicable.add("bf16_accumulation")
        if other_v is not None:
            self._must_fail("other_seed", d, lambda: other_v, discrete_only)

    def result(self) -> CheckResult:
        name = "mutants"
        if self.problems_found:
            unique = list(dict.fromkeys(self.problems_found))
            return CheckResult(name, False, "; ".join(unique[:4]))
        detail = (
            f"rejected: {', '.join(sorted(self.rejected))}; "
            f"accepted: {', '.join(sorted(self.accepted))}"
        )
        not_applicable = self.not_applicable - self.rejected
        if not_applicable:
            detail += f"; not applicable: {', '.join(sorted(not_applicable))}"
        return CheckResult(name, True, detail)


def _check_cost(problem: Problem) -> CheckResult:
    name = "cost"
    for scale in ("full", "smoke"):
        c = problem.cost(scale)
        if not isinstance(c, Cost):
            return CheckResult(name, False, f"cost({scale}) returned {type(c).__name__}, not Cost")
        values = [float(x) for x in c.flops.values()]
        if not (c.bytes > 0 and all(x >= 0 and math.isfinite(x) for x in values)):
            return CheckResult(name, False, f"cost({scale}) has non-positive bytes or bad flops")
    full = problem.cost("full")
    flops = sum(full.flops.values())
    return CheckResult(name, True, f"full: {flops:.3g} FLOPs, {full.bytes:.3g} bytes")


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
    checks: list[CheckResult] = []
    try:
        checks.append(_check_cost(problem))
    except Exception as exc:  # noqa: BLE001
        checks.append(CheckResult("cost", False, f"cost() raised {_describe(exc)}"))

    try:
        first_inputs = problem.make_inputs(main_seeds[0], opts.device, opts.scale)
    except Exception as exc:  # noqa: BLE001
        failed = f"make_inputs raised {_describe(exc)}"
        checks.extend(CheckResult(n, False, failed) for n in CHECK_NAMES if n != "cost")
        return _finish(report, checks, started)
    checks.append(_check_declared_inputs(problem, first_inputs, opts.device))
    try:
        checks.append(_check_deterministic(problem, main_seeds[0], first_inputs, opts))
    except Exception as exc:  # noqa: BLE001
        checks.append(CheckResult("deterministic", False, f"make_inputs raised {_describe(exc)}"))
    del first_inputs

    # Draws are processed one at a time (full-scale workloads are large); each keeps only
    # summaries, and the previous draw's output for the other-seed mutant.
    exact, exact_error = _exact_copy_outputs(problem)
    per_draw: dict[str, list[CheckResult]] = {"declared_outputs": [], "dtype_generic": []}
    stats: dict[int, LeafStats] = {}
    tally = MutantTally(problem, exact)
    discrete_failure: str | None = None
    discrete_count = 0
    previous_v: Any | None = None
    timing_inputs: list[Any] | None = None
    seed = main_seeds[0]
    try:
        for seed in main_seeds:
            d = _run_draw(problem, seed, opts)
            per_draw["declared_outputs"].append(_check_declared_outputs(problem, [d]))
            per_draw["dtype_generic"].append(_check_dtype_generic([d]))
            _update_stats(problem, stats, d)
            tally.add(d, previous_v)
            discrete_count = len(_discrete_indices(d.v))
            discrete_failure = discrete_failure or _discrete_disagreement(problem, d)
            previous_v = d.v
            if timing_inputs is None:
                timing_inputs = d.inputs
            del d
    except Exception as exc:  # noqa: BLE001
        failed = f"reference failed on seed {seed}: {_describe(exc)}"
        done = {c.name for c in checks}
        checks.extend(CheckResult(n, False, failed) for n in CHECK_NAMES if n not in done)
        return _finish(report, checks, started)
    del previous_v

    for results in per_draw.values():
        checks.append(next((r for r in results if not r.passed), results[0]))
    leaf_stats = list(stats.values())
    checks.append(_check_anchor(leaf_stats, exact, exact_error))
    checks.append(_check_discriminative(leaf_stats))
    checks.append(_check_stable(leaf_stats, exact))
    checks.append(tally.result())
    try:
        checks.append(
            _check_discrete(
                problem, discrete_failure, len(main_seeds), discrete_count, extra_seeds, opts
            )
        )
    except Exception as exc:  # noqa: BLE001
        checks.append(CheckResult("discrete_agree", False, f"raised {_describe(exc)}"))

    if opts.device.startswith("cuda") and torch.cuda.is_available() and timing_inputs:
        try:
            report.eager_ms = _time_calls(problem, timing_inputs, opts.timing_calls, anchor=False)
            report.anchor_ms = _time_calls(problem, timing_inputs, 1, anchor=True)
        except Exception as exc:  # noqa: BLE001
            checks.append(CheckResult("timing", False, f"raised {_describe(exc)}"))
    return _finish(report, checks, started)


def _finish(report: ProblemReport, checks: list[CheckResult], started: float) -> ProblemReport:
    order = {n: i for i, n in enumerate(CHECK_NAMES)}
    report.checks = sorted(checks, key=lambda c: order.get(c.name, len(order)))
    report.seconds = time.perf_counter() - started
    return report


# ---------------------------------------------------------------------------------------------
# selecting and loading problems (load errors are reported, not raised)


@dataclass
class Selection:
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
    import fnmatch

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
) -> list[ProblemReport]:
    """Check every selected problem; load errors come first, then problems in id order."""
    reports = list(selection.load_errors)
    for report in reports:
        if progress:
            progress(report)
    for problem in sorted(selection.problems, key=lambda p: p.number):
        try:
            report = check_problem(problem, opts)
        except Exception as exc:  # noqa: BLE001 - one broken problem must not stop the rest
            report = ProblemReport(
                problem.id, problem.slug, str(problem.path), error=_describe(exc)
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


def run_from_args(args: argparse.Namespace) -> int:
    """Select, check and print; returns the exit status (0 all pass, 1 any failure)."""
    opts = options_from_args(args)
    selection = select(args.ids, args.family)

    def progress(report: ProblemReport) -> None:
        if not args.json:
            print(format_report(report), flush=True)

    reports = run_checks(selection, opts, progress)
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
