"""GPU memory a problem's grading plans for at one scale, computed from shapes (no GPU, no data).

One draw is traced: its inputs built by the problem's generator and the reference run on
them, under a dispatch mode (:class:`_Tracer`) that counts the bytes of every tensor an
operator creates and frees them when the last tensor on that storage is gone. A tensor
larger than :data:`REAL_LIMIT_BYTES` is created on the meta device (shape, dtype and strides,
no data) and everything computed from it stays there; smaller ones are computed for real, so
a generator or reference that needs values (routing indices, page tables, ragged lengths)
traces as long as those values live in small tensors. The sizes of one draw
(:class:`DrawSizes`) then give, phase by phase, what each process of a grading holds on the
card (:func:`judge_peak`, :func:`runner_peak`, :func:`plan_from_sizes`; the model is
described in ``docs/grading.md``, "GPU memory of a grading").

A reference that needs the values of a large tensor cannot be traced, and one that takes
over :data:`TRACE_BUDGET_S` (a long loop of small steps) is not traced to the end: then the
figure is the peak measured on a GPU (``problems/measured.json``) when there is one, else
unknown.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from problems.compare import ANCHOR_DTYPES, is_discrete, leaves, promote, reference_numerics
from problems.spec import Problem

CONTEXT_BYTES = 600e6  # one process's CUDA context with torch's kernels loaded
HEADROOM_BYTES = 2e9  # kept free on the card beyond the plan (allocator fragmentation)
COMPARE_CHUNK_ELEMENTS = 1 << 22  # the judge compares outputs on the device this many at a time
# the judge's device workspace of one chunk: u, v, z in float64 and their masks and differences
COMPARE_WORKSPACE_BYTES = 12 * 8 * COMPARE_CHUNK_ELEMENTS
REAL_LIMIT_BYTES = 1 << 26  # tensors larger than this are traced on the meta device
TRACE_BUDGET_S = 60.0  # a reference that runs longer while traced is not traced further


class TraceBudgetExceeded(RuntimeError):
    """Tracing a reference took longer than its budget."""


def _storage_bytes(values: Any) -> list[float]:
    """Per tensor leaf of ``values``: its storage's bytes, 0 for a storage met before."""
    seen: set[int] = set()
    sizes = []
    for t in leaves([values]):
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            sizes.append(0.0 if storage._cdata in seen else float(storage.nbytes()))
            seen.add(storage._cdata)
    return sizes


def _bytes(values: Any) -> float:
    return sum(_storage_bytes(values))


class _Tracer(TorchDispatchMode):
    """Counts bytes of storages created by operators, live and peak (a storage is freed when
    the last tensor object on it is collected). Large results go to the meta device, and an
    operator with a meta argument runs on meta (its other tensor arguments as meta too)."""

    def __init__(self, budget_s: float | None = None, held: Any = ()) -> None:
        """``held``: tensors that exist already (views of them are not new memory)."""
        super().__init__()
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage key -> [tensor count, bytes]
        self._held = {
            t.untyped_storage()._cdata for t in leaves([held]) if isinstance(t, torch.Tensor)
        }
        self.deadline = None if budget_s is None else time.monotonic() + budget_s

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TraceBudgetExceeded(f"tracing took over {TRACE_BUDGET_S:.0f} s")
        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        if any(isinstance(a, torch.Tensor) and a.is_meta for a in flat):
            out = _on_meta(func, flat, spec)
        else:
            out = self._sized(func, flat, spec, args, kwargs)
        for t in leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    @staticmethod
    def _sized(func: Any, flat: list[Any], spec: Any, args: Any, kwargs: Any) -> Any:
        """The operator for real, unless its results would be large: then on meta."""
        try:
            probe = _on_meta(func, flat, spec)
        except Exception:  # noqa: BLE001 - no meta kernel, or it needs data: run it for real
            return func(*args, **kwargs)
        if _bytes(probe) > REAL_LIMIT_BYTES:
            return probe
        return func(*args, **kwargs)

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._held:
            return
        entry = self._refs.get(key)
        if entry is None:
            entry = self._refs[key] = [0, storage.nbytes()]
            self.live += entry[1]
            self.peak = max(self.peak, self.live)
        entry[0] += 1
        weakref.finalize(t, self._release, key)

    def _release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._refs[key]


def _meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and not value.is_meta:
        return torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device="meta"
        )
    if isinstance(value, torch.device):
        return torch.device("meta")
    if isinstance(value, torch.Generator):
        return None
    return value


def _on_meta(func: Any, flat: list[Any], spec: Any) -> Any:
    args, kwargs = tree_unflatten([_meta(a) for a in flat], spec)
    if "device" in kwargs:
        kwargs["device"] = torch.device("meta")
    return func(*args, **kwargs)


@dataclass(frozen=True)
class DrawSizes:
    """What one draw's tensors weigh, in bytes (one reference run each way)."""

    inputs: float  # the inputs at their own dtypes
    inplace_inputs: float  # the inputs a declared in-place output updates
    promoted: list[float]  # per input leaf: its float64 copy (others: a plain copy)
    input_leaves: list[float]  # per input leaf at its own dtype
    outputs: float  # the reference's outputs at the original dtypes (the submission's too)
    anchor_outputs: float  # the anchor's outputs (float64)
    reference_peak: float  # one reference run beyond its inputs, its outputs included
    anchor_peak: float  # one anchor run beyond its promoted inputs, its outputs included
    largest_output: int  # elements of the largest output compared in float64 (bounds a chunk)


def draw_sizes(
    problem: Problem, scale: str = "full", budget_s: float = TRACE_BUDGET_S
) -> DrawSizes:
    """The sizes of one draw of ``problem`` at ``scale``, traced (raises when the generator or
    the reference needs the values of a large tensor, or runs past ``budget_s``)."""
    with _Tracer(budget_s):
        inputs = problem.make_inputs(0, "cpu", scale)
    with _Tracer(budget_s, inputs):
        promoted = promote(inputs)
    tensors = [t for t in leaves(list(inputs)) if isinstance(t, torch.Tensor)]
    in_leaves = _storage_bytes(inputs)
    pr_leaves = [
        b * 8 / t.element_size() if t.dtype in ANCHOR_DTYPES else b
        for t, b in zip(tensors, in_leaves)
    ]
    inplace = {problem.inputs.index(name) for name in problem.inplace.values()}
    inplace_bytes = sum(_bytes(inputs[j]) for j in inplace)
    v_peak, v_out, out_leaves = _reference_peak(problem, inputs, budget_s)
    z_peak, z_out, _ = _reference_peak(problem, promoted, budget_s)
    largest = max(
        (
            t.numel()
            for t in out_leaves
            if isinstance(t, torch.Tensor) and not is_discrete(t.dtype)
        ),
        default=0,
    )
    return DrawSizes(
        sum(in_leaves), inplace_bytes, pr_leaves, in_leaves, v_out, z_out, v_peak, z_peak, largest
    )


def _reference_peak(
    problem: Problem, inputs: list[Any], budget_s: float
) -> tuple[float, float, list[Any]]:
    """(peak bytes of one reference run beyond its inputs, bytes of its outputs, the output
    leaves as meta tensors)."""
    with _Tracer(budget_s, inputs) as counter, reference_numerics():
        out = problem.reference(*inputs)
    return float(counter.peak), _bytes(out), [_meta(t) for t in leaves([out])]


# -- the plan: what each process holds on the card, phase by phase ----------------------------
def promotion_peak(sizes: DrawSizes) -> float:
    """The judge's float64 copies made leaf by leaf from the host: the copies so far, and the
    current leaf at its own dtype on its way to float64."""
    done, peak = 0.0, 0.0
    for own, promoted in zip(sizes.input_leaves, sizes.promoted):
        peak = max(peak, done + own + promoted)
        done += promoted
    return peak


def judge_peak(sizes: DrawSizes, device: str = "cuda") -> float:
    """The judge's peak on ``device`` (its CUDA context aside).

    On a GPU the judge holds a draw (its inputs and its copy of the outputs) only while it
    checks the call; for the anchor the draw and each reference's outputs wait on the host and
    each reference run gets a fresh device copy of the inputs; outputs are compared on the
    device one chunk at a time. On the CPU, host and device are one memory: the draw and the
    outputs held on the host count too.
    """
    draw = sizes.inputs + sizes.outputs
    call = draw + sizes.inplace_inputs
    eager = draw
    v_run = sizes.inputs + sizes.reference_peak
    z_run = max(promotion_peak(sizes), sum(sizes.promoted) + sizes.anchor_peak)
    compare = compare_workspace(sizes)
    if device == "cpu":
        v_run += draw
        z_run += draw + sizes.outputs
        compare += draw + sizes.outputs + sizes.anchor_outputs
    return max(call, eager, v_run, z_run, compare)


def compare_workspace(sizes: DrawSizes) -> float:
    """The judge's workspace for one compared chunk (no larger than the largest output)."""
    return COMPARE_WORKSPACE_BYTES * min(sizes.largest_output, COMPARE_CHUNK_ELEMENTS) / (
        COMPARE_CHUNK_ELEMENTS
    )


def runner_peak(sizes: DrawSizes) -> float:
    """A runner's peak (the reference runner's, and the submission's as planned): its copy of
    the inputs and one reference run (outputs and workspace; a submission's own workspace is
    not known, the eager reference's stands for it)."""
    return sizes.inputs + sizes.reference_peak


@dataclass(frozen=True)
class MemoryPlan:
    """The card memory a grading of one problem plans for, and how it was found."""

    total_bytes: float | None  # the grading's peak on one card, CUDA contexts included
    judge_bytes: float | None = None
    runner_bytes: float | None = None
    sizes: DrawSizes | None = None
    method: str = "traced"  # traced | measured (GPU peak, problems/measured.json) | unknown
    note: str = ""

    def fits(self, capacity_bytes: float, headroom: float = HEADROOM_BYTES) -> bool | None:
        """Whether the plan fits a card of ``capacity_bytes`` with ``headroom`` kept free
        (None: unknown)."""
        if self.total_bytes is None:
            return None
        return self.total_bytes + headroom <= capacity_bytes


# the name the callers of the first planner used
MemoryNeed = MemoryPlan


def plan_from_sizes(sizes: DrawSizes) -> MemoryPlan:
    """The grading's peak on one card: the eager phase (the judge shipping a draw, the
    reference runner, three CUDA contexts with the submission's runner started ahead) or the
    checks (the judge and the submission's runner, two contexts), whichever is larger."""
    judge, runner = judge_peak(sizes, "cuda"), runner_peak(sizes)
    eager = sizes.inputs + sizes.outputs + runner_peak(sizes) + 3 * CONTEXT_BYTES
    checks = judge + runner + 2 * CONTEXT_BYTES
    return MemoryPlan(max(eager, checks), judge, runner, sizes)


def memory_plan(problem: Problem, scale: str = "full") -> MemoryPlan:
    """The plan traced from shapes, else the measured GPU peak, else unknown."""
    try:
        return plan_from_sizes(draw_sizes(problem, scale))
    except TraceBudgetExceeded as exc:
        why = str(exc)
    except Exception as exc:  # noqa: BLE001 - a reference that needs a large tensor's values
        why = f"{type(exc).__name__}"
    if scale == "full":
        from problems.measured import measured

        row = measured(problem.id)
        if row and row.get("peak_gpu_gb") is not None:
            peak = float(row["peak_gpu_gb"]) * 1e9
            note = f"not traceable ({why}): peak measured on the {row['device']}"
            return MemoryPlan(peak + 2 * CONTEXT_BYTES, method="measured", note=note)
    return MemoryPlan(None, method="unknown", note=f"not traceable ({why}), never measured")


memory_need = memory_plan
