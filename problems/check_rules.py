"""The individual checks of the problem validator, one function per named check.

Each takes what the runner (:mod:`problems.check`) collected (the first inputs, draws, the
reference-error statistics of :class:`LeafStats`) and returns one :class:`CheckResult`.
The ``mutants`` check lives in :mod:`problems.check_mutants`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from problems import mutants
from problems.check_draws import (
    Draw,
    discrete_indices,
    float_indices,
    inputs_equal,
    leaf_names,
    run_draw,
    same_storage,
    tensor_equal,
)
from problems.check_report import CheckOptions, CheckResult
from problems.compare import allowance_for, bit_pattern, leaves
from problems.spec import Cost, Problem

#: allowance / max|z| must not exceed this, per output dtype.
DISCRIMINATION_LIMITS: dict[torch.dtype, float] = {
    torch.bfloat16: 0.05,
    torch.float16: 0.05,
    torch.float32: 1e-3,
}
#: Largest allowed ratio between the largest and smallest relative reference error
#: (max|v − z| / max|z|) over the draws, per float output.
STABLE_ERROR_FACTOR = 10.0


def check_declared_inputs(problem: Problem, inputs: Sequence[Any], device: str) -> CheckResult:
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


def check_declared_outputs(problem: Problem, draws: Sequence[Draw]) -> CheckResult:
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
                and same_storage(out, inp)
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
                if isinstance(inp, torch.Tensor) and same_storage(out, inp):
                    return CheckResult(
                        name,
                        False,
                        f"output {problem.outputs[out_i]!r} aliases input "
                        f"{problem.inputs[in_i]!r} without an INPLACE declaration",
                    )
        for in_i, (before, after) in enumerate(zip(d.inputs, d.v_inputs)):
            if in_i in declared_inputs or not isinstance(before, torch.Tensor):
                continue
            if not tensor_equal(before, after):
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


def exact_copy_outputs(problem: Problem) -> tuple[set[str], str | None]:
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


def update_stats(problem: Problem, stats: dict[int, LeafStats], d: Draw) -> None:
    """Add one draw's reference error of every float output to ``stats`` (index → stats)."""
    vl, zl = leaves(d.v), leaves(d.z)
    if not stats:
        names = leaf_names(problem, d.v)
        stats.update({i: LeafStats(names[i], vl[i].dtype) for i in float_indices(d.v)})
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


def check_anchor(
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


def check_discriminative(stats: Sequence[LeafStats]) -> CheckResult:
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


def check_stable(stats: Sequence[LeafStats], exact: set[str]) -> CheckResult:
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


def check_dtype_generic(draws: Sequence[Draw]) -> CheckResult:
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


def check_deterministic(
    problem: Problem, seed: int, first: Sequence[Any], opts: CheckOptions
) -> CheckResult:
    name = "deterministic"
    again = problem.make_inputs(seed, opts.device, opts.scale)
    same = inputs_equal(first, again)
    del again
    if not same:
        return CheckResult(name, False, f"make_inputs({seed}) gave different inputs twice")
    other = problem.make_inputs(seed + 1, opts.device, opts.scale)
    if inputs_equal(first, other):
        return CheckResult(name, False, f"make_inputs({seed}) and ({seed + 1}) are identical")
    return CheckResult(name, True, "same seed → same inputs; new seed → new inputs")


def discrete_disagreement(problem: Problem, d: Draw) -> str | None:
    """The first discrete output where the reference and the anchor differ, or None."""
    vl, zl = leaves(d.v), leaves(d.z)
    names = leaf_names(problem, d.v)
    for i in discrete_indices(d.v):
        a = vl[i]
        b = zl[i] if i < len(zl) else None
        if not isinstance(b, torch.Tensor) or b.dtype != a.dtype or b.shape != a.shape:
            return f"{names[i]}: anchor is not a {a.dtype} tensor of shape {tuple(a.shape)}"
        if not tensor_equal(a, b):
            diff = (bit_pattern(a) != bit_pattern(b)) if a.dtype.is_floating_point else (a != b)
            return f"{names[i]}: {int(diff.sum())} elements differ (seed {d.seed})"
    return None


def check_discrete(
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
        d = run_draw(problem, seed, opts)
        found = discrete_disagreement(problem, d)
        del d
        if found:
            return CheckResult(name, False, found)
        checked += 1
    return CheckResult(name, True, f"{discrete_count} discrete outputs agree over {checked} draws")


def check_cost(problem: Problem) -> CheckResult:
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
