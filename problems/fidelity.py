"""Compare our references with upstream's on identical inputs, with both generators.

For each problem with an upstream file: the interface (argument count and names, output
structure) is compared; then both references run on one draw of *our* generator and one draw
of *upstream's* generator, and upstream's output is judged as a candidate by the rule of
:mod:`problems.compare` (anchor: our reference in float64). Verdicts per problem:

- ``same``: every run passes the rule and the interfaces agree;
- ``differs``: some run fails the rule (its max error and our allowance are given);
- ``interface differs``: argument count/names or output structure differ (values are still
  compared leaf by leaf where the counts allow);
- ``skipped``: the draw is too large for the device's memory budget (said per run);
- ``error``: something raised (the message says what).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from problems.compare import (
    check_outputs,
    clone_inputs,
    leaves,
    reference_and_anchor,
    reference_numerics,
    structure_mismatch,
)
from problems.spec import Problem
from problems.upstream import DeviceRedirect, parameter_names, upstream_inputs

VERDICTS = ("same", "differs", "interface differs", "skipped", "error", "no upstream")
_RANK = {"same": 0, "skipped": 1, "differs": 2, "interface differs": 3, "error": 4}


@dataclass
class RunResult:
    """One generator's draw: the verdict on upstream's output against ours."""

    generator: str  # "ours" or "upstream"
    verdict: str
    max_error: float | None = None
    allowance: float | None = None
    detail: str = ""
    scale: str = ""


@dataclass
class FidelityRow:
    """The comparison of one problem."""

    id: str
    slug: str
    source: str  # "upstream file", "sol-execbench" or ""
    verdict: str
    interface: str = ""
    runs: list[RunResult] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 2)
        return data


@dataclass(frozen=True)
class FidelityOptions:
    """Device, seed and memory budget (bytes of one draw's inputs, times a working factor)."""

    device: str = "cpu"
    seed: int = 20
    budget_gb: float = 6.0
    working_factor: float = 8.0  # anchor copies (float64) and intermediates per input byte


def input_bytes(inputs: Sequence[Any]) -> int:
    return sum(x.numel() * x.element_size() for x in leaves(list(inputs)) if torch.is_tensor(x))


def full_scale_bytes(problem: Problem) -> int | None:
    """Bytes of our full-scale inputs, traced without data (None when not traceable)."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            return input_bytes(problem.make_inputs(0, "cpu", "full"))
    except Exception:  # noqa: BLE001 - data-dependent generators cannot be traced
        return None


def interface_notes(problem: Problem, module: ModuleType) -> tuple[str, bool]:
    """(description of argument differences, whether our inputs can be passed to upstream)."""
    theirs = parameter_names(module.reference)
    ours = problem.inputs
    if len(theirs) != len(ours):
        return (
            f"arguments: ours {len(ours)} {list(ours)}, upstream {len(theirs)} {list(theirs)}",
            len(destinations(problem, len(theirs))) > 0,
        )
    renamed = [f"{a}→{b}" for a, b in zip(ours, theirs) if a != b]
    return ("argument names: " + ", ".join(renamed)) if renamed else "", True


class ShapeRejected(AssertionError):
    """Upstream's reference asserted on the shapes it was given."""


def destinations(problem: Problem, arity: int) -> tuple[str, ...]:
    """Our trailing inputs past upstream's ``arity`` when all are in-place destinations
    (upstream returns those outputs as new tensors instead); empty otherwise."""
    extra = problem.inputs[arity:]
    return extra if extra and set(extra) <= set(problem.inplace.values()) else ()


def with_destinations(
    problem: Problem, module: ModuleType, inputs: list[Any], device: str
) -> list[Any]:
    """Upstream's draw plus zeroed destinations shaped like upstream's matching outputs."""
    with reference_numerics(), DeviceRedirect(device):
        produced = leaves(module.reference(*clone_inputs(inputs)))
    extra = []
    for name in problem.inputs[len(inputs) :]:
        out = next(o for o, i in problem.inplace.items() if i == name)
        extra.append(torch.zeros_like(produced[problem.outputs.index(out)]))
    return [*inputs, *extra]


def _judge(problem: Problem, module: ModuleType, inputs: list[Any], device: str) -> RunResult:
    v, z = reference_and_anchor(problem.reference, inputs)
    with reference_numerics(), DeviceRedirect(device):
        try:
            arity = len(parameter_names(module.reference)) or len(inputs)
            u = module.reference(*clone_inputs(inputs)[:arity])
        except AssertionError as exc:  # upstream asserts its own (full-scale) shapes
            raise ShapeRejected(str(exc)) from exc
    shape_note = structure_mismatch(u, v)
    if shape_note and len(leaves(u)) == len(leaves(v)):
        u = type(v)(leaves(u)) if isinstance(v, (tuple, list)) else leaves(u)[0]
    passed, mismatch, checks = check_outputs(u, v, z)
    worst = max(
        (c for c in checks if c.max_error is not None),
        default=None,
        key=lambda c: c.max_error if c.max_error is not None else -1.0,
    )
    failing = "; ".join(c.detail for c in checks if not c.passed)
    if shape_note:
        values = "values agree" if passed else f"values differ ({mismatch or failing})"
        return RunResult(
            "",
            "interface differs",
            _num(worst, "max_error"),
            _num(worst, "allowance"),
            f"{shape_note}; {values}",
        )
    return RunResult(
        "",
        "same" if passed else "differs",
        _num(worst, "max_error"),
        _num(worst, "allowance"),
        mismatch or failing,
    )


def _num(check: Any, attr: str) -> float | None:
    value = getattr(check, attr, None) if check is not None else None
    return None if value is None or math.isnan(value) else float(value)


def _guarded(generator: str, scale: str, body: Callable[[], RunResult]) -> RunResult:
    try:
        result = body()
    except Exception as exc:  # noqa: BLE001 - one failing run must not stop the report
        text = str(exc).strip().splitlines()
        result = RunResult(
            "", "error", detail=f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
        )
    result.generator, result.scale = generator, scale
    return result


def cost_bytes(problem: Problem) -> int | None:
    """Compulsory bytes of our full-scale workload from its cost model (no data drawn)."""
    try:
        return int(problem.cost("full").bytes)
    except Exception:  # noqa: BLE001 - a broken cost model only loses the estimate
        return None


def draw_bytes(problem: Problem, module: ModuleType, upstream_first: bool = False) -> int | None:
    """Size of one full-scale draw: traced (ours, then upstream's, or the reverse), else the
    cost model's compulsory bytes, since generators that call ``.item()`` cannot be traced."""
    tracers = [lambda: full_scale_bytes(problem), lambda: upstream_draw_bytes(module)]
    for trace in reversed(tracers) if upstream_first else tracers:
        found = trace()
        if found is not None:
            return found
    return cost_bytes(problem)


def _our_scale(problem: Problem, module: ModuleType, opts: FidelityOptions) -> str:
    full = draw_bytes(problem, module)
    if full is not None and full * opts.working_factor <= opts.budget_gb * 1e9:
        return "full"
    return "smoke"


def _run_ours(
    problem: Problem, module: ModuleType, opts: FidelityOptions, callable_: bool
) -> RunResult:
    scale = _our_scale(problem, module, opts)

    def body() -> RunResult:
        if not callable_:
            return RunResult("", "interface differs", detail="argument count differs; not run")
        inputs = problem.make_inputs(opts.seed, opts.device, scale)
        try:
            return _judge(problem, module, inputs, opts.device)
        except ShapeRejected:
            if scale == "full":
                raise
            return RunResult(
                "",
                "skipped",
                detail="upstream's reference asserts its full-scale shapes and our full-scale "
                f"draw is over the {opts.budget_gb:g} GB budget on {opts.device}",
            )

    return _guarded("ours", scale, body)


def upstream_draw_bytes(module: ModuleType) -> int | None:
    """Bytes of upstream's draw, traced without data (None when not traceable)."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            return input_bytes(upstream_inputs(module, 0, "cpu"))
    except Exception:  # noqa: BLE001 - data-dependent generators cannot be traced
        return None


def _run_upstream(problem: Problem, module: ModuleType, opts: FidelityOptions) -> RunResult:
    full = draw_bytes(problem, module, upstream_first=True)
    if full is not None and full * opts.working_factor > opts.budget_gb * 1e9:
        return RunResult(
            "upstream",
            "skipped",
            scale="upstream",
            detail=(
                f"too heavy for {opts.device}: ~{full / 1e9:.1f} GB of inputs "
                f"(budget {opts.budget_gb:g} GB / {opts.working_factor:g})"
            ),
        )

    def body() -> RunResult:
        inputs = upstream_inputs(module, opts.seed, opts.device)
        if destinations(problem, len(inputs)):
            inputs = with_destinations(problem, module, inputs, opts.device)
        if len(inputs) != len(problem.inputs):
            return RunResult(
                "",
                "interface differs",
                detail=(f"upstream draws {len(inputs)} inputs, ours takes {len(problem.inputs)}"),
            )
        notes, inputs = adapt_kinds(problem, inputs, opts)
        result = _judge(problem, module, inputs, opts.device)
        if notes:
            values = "values agree" if result.verdict == "same" else "values differ"
            detail = "; ".join(x for x in (notes, values, result.detail) if x)
            result.verdict, result.detail = "interface differs", detail
        return result

    return _guarded("upstream", "upstream", body)


def _kind(value: Any) -> str:
    return "tensor" if torch.is_tensor(value) else type(value).__name__


def adapt_kinds(
    problem: Problem, theirs: list[Any], opts: FidelityOptions
) -> tuple[str, list[Any]]:
    """Where upstream passes a Python number and we a one-element tensor (or the reverse),
    say so and convert upstream's value to our form, so the values can still be compared."""
    ours = problem.make_inputs(opts.seed, opts.device, "smoke")
    notes, adapted = [], list(theirs)
    for i, (name, mine, their) in enumerate(zip(problem.inputs, ours, theirs)):
        if _kind(mine) == _kind(their):
            continue
        notes.append(f"{name}: upstream passes {_kind(their)}, ours {_kind(mine)}")
        if torch.is_tensor(mine) and isinstance(their, (int, float)) and mine.numel() == 1:
            adapted[i] = torch.full(mine.shape, their, dtype=mine.dtype, device=mine.device)
        elif torch.is_tensor(their) and isinstance(mine, (int, float)) and their.numel() == 1:
            adapted[i] = type(mine)(their.item())
    return "; ".join(notes), adapted


def overall(runs: Sequence[RunResult], interface: str) -> str:
    """The problem's verdict from its runs (worst wins; all skipped is skipped)."""
    verdicts = [r.verdict for r in runs]
    if interface.startswith("arguments") or "interface differs" in verdicts:
        return "interface differs"
    if not verdicts or all(v == "skipped" for v in verdicts):
        return "skipped"
    worst = max((v for v in verdicts if v != "skipped"), key=lambda v: _RANK.get(v, 4))
    if worst == "same" and interface:
        return "interface differs"
    return worst


def compare_problem(
    problem: Problem, module: ModuleType, source: str, opts: FidelityOptions
) -> FidelityRow:
    """Both runs for one problem against one imported upstream module."""
    started = time.perf_counter()
    interface, callable_ = interface_notes(problem, module)
    runs = [_run_ours(problem, module, opts, callable_)]
    gc.collect()
    runs.append(_run_upstream(problem, module, opts))
    gc.collect()
    if opts.device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
    row = FidelityRow(problem.id, problem.slug, source, overall(runs, interface), interface, runs)
    row.seconds = time.perf_counter() - started
    return row


def missing_row(problem: Problem, reason: str) -> FidelityRow:
    return FidelityRow(problem.id, problem.slug, "", "no upstream", reason)


def error_row(problem: Problem, source: str, reason: str) -> FidelityRow:
    return FidelityRow(problem.id, problem.slug, source, "error", reason)


def upstream_paths(
    upstream: Path, sol_dataset: Path | None, work_dir: Path
) -> tuple[dict[str, tuple[str, Path]], dict[str, str]]:
    """Upstream files by id with their source kind, plus errors by id (recipes that failed)."""
    from problems.sol_recipes import rebuild
    from problems.upstream import problems_dir, upstream_files

    found = {pid: ("upstream file", path) for pid, path in upstream_files(upstream).items()}
    errors: dict[str, str] = {}
    if sol_dataset is not None:
        written, errors = rebuild(problems_dir(upstream), sol_dataset, work_dir)
        for pid, path in written.items():
            found.setdefault(pid, ("sol-execbench", path))
    return found, errors
