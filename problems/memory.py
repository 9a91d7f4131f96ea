"""GPU memory a problem's grading needs at one scale, computed from shapes (no GPU, no data).

The workload's inputs are built under PyTorch's fake-tensor mode and the reference runs on the
meta device (shapes only) under a dispatch mode that counts the bytes of every tensor an
operator creates and frees them when the last tensor on that storage is gone, so the peak of
a reference run is known without allocating it. A grading holds, on one GPU at once:

- the judge: the inputs, the float64 anchor's inputs and the peak of the anchor reference
  (its outputs included), then the reference at the original dtypes (``v``): the larger of
  the two phases, plus the inputs kept throughout;
- the runner: its copy of the inputs and the submission's outputs (a submission's own
  workspace is not known; :data:`CONTEXT_BYTES` per process stands for the CUDA contexts).

Generators or references that need values cannot be traced, and a reference that takes over
:data:`TRACE_BUDGET_S` on the meta device (a long loop of small steps) is not traced to the
end: then the figure is the peak measured on a GPU (``problems/measured.json``) when there
is one, else unknown.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from problems.compare import leaves, promote, reference_numerics
from problems.spec import Problem

CONTEXT_BYTES = 2 * 600e6  # a CUDA context with torch's kernels loaded, judge and runner
TRACE_BUDGET_S = 60.0  # a reference that runs longer on the meta device (a long Python loop
# of small steps) is not traced further: the measured peak stands in


class TraceBudgetExceeded(RuntimeError):
    """Tracing a reference took longer than its budget."""


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes a grading needs on the GPU, and how they were found."""

    total_bytes: float | None
    inputs_bytes: float = 0.0
    anchor_peak_bytes: float = 0.0  # the float64 reference run, its inputs included
    outputs_bytes: float = 0.0
    method: str = "traced"  # traced | measured (GPU peak, problems/measured.json) | unknown
    note: str = ""

    def fits(self, capacity_bytes: float) -> bool | None:
        """Whether the need fits a GPU of ``capacity_bytes`` (None: unknown)."""
        return None if self.total_bytes is None else self.total_bytes <= capacity_bytes


class _LiveBytes(TorchDispatchMode):
    """Counts bytes of storages created by operators, live and peak (a storage is freed when
    the last tensor object on it is collected)."""

    def __init__(self, budget_s: float | None = None) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage key -> [tensor count, bytes]
        self.deadline = None if budget_s is None else time.monotonic() + budget_s

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TraceBudgetExceeded(f"tracing took over {TRACE_BUDGET_S:.0f} s")
        out = func(*args, **(kwargs or {}))
        for t in leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage._cdata
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


def _bytes(values: Sequence[Any]) -> float:
    return float(
        sum(
            t.untyped_storage().nbytes()
            for t in leaves(list(values))
            if isinstance(t, torch.Tensor)
        )
    )


def _reference_peak(problem: Problem, inputs: list[Any], budget_s: float) -> tuple[float, float]:
    """(peak bytes of one reference run beyond its inputs, bytes of its outputs)."""
    with _LiveBytes(budget_s) as counter, reference_numerics():
        out = problem.reference(*inputs)
        out_bytes = _bytes([out])
        del out
    return float(counter.peak), out_bytes


def _on_meta(values: Any) -> Any:
    """Meta tensors with the shapes, dtypes and strides of ``values`` (containers kept)."""
    if isinstance(values, torch.Tensor):
        return torch.empty_strided(values.shape, values.stride(), dtype=values.dtype, device="meta")
    if isinstance(values, (list, tuple)):
        return type(values)(_on_meta(v) for v in values)
    return values


def traced_need(
    problem: Problem, scale: str = "full", budget_s: float = TRACE_BUDGET_S
) -> MemoryNeed:
    """The need from shapes: inputs built under fake tensors, the reference run on the meta
    device (raises when the generator or the reference needs data)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = problem.make_inputs(0, "cpu", scale)
    inputs = _on_meta(fake)  # plain meta tensors: no fake-tensor dispatch from here on
    del fake
    in_bytes = _bytes(inputs)
    with _LiveBytes() as copies:
        promoted = promote(inputs)
    anchor_peak, _ = _reference_peak(problem, promoted, budget_s)
    anchor = copies.peak + anchor_peak
    del promoted
    v_peak, out_bytes = _reference_peak(problem, inputs, budget_s)
    judge = in_bytes + max(anchor, v_peak)
    runner = in_bytes + out_bytes
    return MemoryNeed(judge + runner + CONTEXT_BYTES, in_bytes, anchor, out_bytes)


def memory_need(problem: Problem, scale: str = "full") -> MemoryNeed:
    """The need traced from shapes, else the measured GPU peak, else unknown."""
    try:
        return traced_need(problem, scale)
    except TraceBudgetExceeded as exc:
        why = str(exc)
    except Exception as exc:  # noqa: BLE001 - data-dependent generators cannot be traced
        why = f"{type(exc).__name__}"
    if scale == "full":
        from problems.measured import measured

        row = measured(problem.id)
        if row and row.get("peak_gpu_gb") is not None:
            peak = float(row["peak_gpu_gb"]) * 1e9
            note = f"not traceable ({why}): peak measured on the {row['device']}"
            return MemoryNeed(peak + CONTEXT_BYTES, method="measured", note=note)
    return MemoryNeed(None, method="unknown", note=f"not traceable ({why}), never measured")
