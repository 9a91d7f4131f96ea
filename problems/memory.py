"""GPU memory a problem's grading plans for at one scale, computed from shapes (no GPU, no data).

One draw is traced: its inputs built by the problem's generator and the reference run on
them, under a dispatch mode (:class:`_Tracer`) that counts the bytes of every tensor an
operator creates and frees them when the last tensor on that storage is gone. A tensor
larger than :data:`REAL_LIMIT_BYTES` is created on the meta device (shape, dtype and strides,
no data) and everything computed from it stays there; smaller ones are computed for real, so
a generator or reference that needs values (routing indices, page tables, ragged lengths)
traces as long as those values live in small tensors. A generator's scalar of a large tensor
is answered by the value that accepts its draw (:func:`_assumed_scalar`), a real boolean mask
indexes by the indices it selects, and a reference's mask of a large tensor is sized as if
every element were selected (an upper bound). The sizes of one draw (:class:`DrawSizes`) then
give, phase by phase, what each process of a grading holds on the card
(:mod:`problems.memory_model`; described in ``docs/grading.md``, "GPU memory of a grading");
:func:`memory_plan` reads them from the stored plans (:mod:`problems.memory_store`) first.

A reference that needs a scalar of a large tensor cannot be traced, and one that takes over
its budget (:data:`TRACE_BUDGET_S` during a grading; ``--write-plans`` allows more) is not
traced to the end: then the figure is the peak measured on a GPU (``problems/measured.json``)
when there is one, else unknown.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from problems.compare import ANCHOR_DTYPES, is_discrete, leaves, promote, reference_numerics
from problems.memory_model import (  # noqa: F401 - the model's names, as callers import them
    COMPARE_CHUNK_ELEMENTS,
    COMPARE_WORKSPACE_BYTES,
    CONTEXT_BYTES,
    HEADROOM_BYTES,
    DrawSizes,
    MemoryPlan,
    compare_workspace,
    judge_peak,
    measured_plan,
    placed_plan,
    plan_from_sizes,
    promotion_peak,
    runner_peak,
)
from problems.spec import Problem

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


_SCALAR = torch.ops.aten._local_scalar_dense.default
_INDEXING = (
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put.default,
    torch.ops.aten.index_put_.default,
)


def _assumed_scalar(dtype: torch.dtype) -> bool | int | float:
    """The value a data-dependent scalar of a meta tensor is assumed to have: the answer that
    lets a generator's check accept its draw (no tie left, nothing to redraw, a margin met):
    ``False`` for a boolean, 0 for an integer, +inf for a float."""
    if dtype == torch.bool:
        return False
    if dtype.is_floating_point:
        return float("inf")
    return 0


class _Tracer(TorchDispatchMode):
    """Counts bytes of storages created by operators, live and peak (a storage is freed when
    the last tensor object on it is collected). Large results go to the meta device, and an
    operator with a meta argument runs on meta (its other tensor arguments as meta too)."""

    def __init__(
        self, budget_s: float | None = None, held: Any = (), assume: bool = False
    ) -> None:
        """``held``: tensors that exist already (views of them are not new memory);
        ``assume``: answer a meta tensor's scalar by :func:`_assumed_scalar` (a generator's
        accept-or-redraw checks; a reference's data-dependent shapes still raise)."""
        super().__init__()
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage key -> [tensor count, bytes]
        self._held = {
            t.untyped_storage()._cdata for t in leaves([held]) if isinstance(t, torch.Tensor)
        }
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self.budget_s = budget_s
        self.assume = assume
        self.assumed = 0  # data-dependent scalars of meta tensors answered by assumption

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TraceBudgetExceeded(f"tracing took over {self.budget_s:.0f} s")
        kwargs = kwargs or {}
        if func in _INDEXING and len(args) > 1:
            args = (args[0], [j for i in args[1] for j in self._index(i)], *args[2:])
        flat, spec = tree_flatten((args, kwargs))
        if func is _SCALAR and flat[0].is_meta and self.assume:
            self.assumed += 1
            return _assumed_scalar(flat[0].dtype)
        if any(isinstance(a, torch.Tensor) and a.is_meta for a in flat):
            out = _on_meta(func, flat, spec)
        else:
            out = self._sized(func, flat, spec, args, kwargs)
        for t in leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _index(self, index: Any) -> list[Any]:
        """One boolean mask of an indexing operator as the integer indices it selects: found
        from its values when it is real (exact), none at all when it is a meta tensor of a
        generator (nothing left to redraw); else left as it is (on meta: every element)."""
        if not isinstance(index, torch.Tensor) or index.dtype not in (torch.bool, torch.uint8):
            return [index]
        if not index.is_meta:
            return list(index.nonzero().unbind(1))
        if self.assume:
            self.assumed += 1
            return [torch.empty(0, dtype=torch.long, device="meta")] * index.dim()
        return [index]

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


def draw_sizes(
    problem: Problem, scale: str = "full", budget_s: float = TRACE_BUDGET_S
) -> DrawSizes:
    """The sizes of one draw of ``problem`` at ``scale``, traced (raises when the generator or
    the reference needs the values of a large tensor, or runs past ``budget_s``)."""
    with _Tracer(budget_s, assume=True) as generator:
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
    with _nonzero_bound():
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
        sum(in_leaves), inplace_bytes, pr_leaves, in_leaves, v_out, z_out, v_peak, z_peak,
        largest, generator.assumed,
    )


@contextlib.contextmanager
def _nonzero_bound() -> Iterator[None]:
    """``nonzero`` (and boolean indexing) of a meta tensor sized as if every element were
    nonzero: an upper bound of the memory, where the data would give the exact count."""
    from torch.fx.experimental import _config

    saved = _config.meta_nonzero_assume_all_nonzero
    _config.meta_nonzero_assume_all_nonzero = True
    try:
        yield
    finally:
        _config.meta_nonzero_assume_all_nonzero = saved


def _reference_peak(
    problem: Problem, inputs: list[Any], budget_s: float
) -> tuple[float, float, list[Any]]:
    """(peak bytes of one reference run beyond its inputs, bytes of its outputs, the output
    leaves as meta tensors)."""
    with _Tracer(budget_s, inputs) as counter, reference_numerics():
        out = problem.reference(*inputs)
    return float(counter.peak), _bytes(out), [_meta(t) for t in leaves([out])]


def anchor_flops(problem: Problem, scale: str) -> float:
    """The FLOPs of one reference run at ``scale`` (every math type: the anchor runs them all
    in float64), for the host anchor's time estimate."""
    return float(sum(problem.cost(scale).flops.values()))


def traced_plan(problem: Problem, scale: str = "full") -> tuple[DrawSizes | None, str]:
    """(the sizes of one traced draw, "") or (None, why it could not be traced)."""
    try:
        return draw_sizes(problem, scale), ""
    except Exception as exc:  # noqa: BLE001 - a reference that needs a large tensor's values
        return None, traced_plan_error(exc)


def traced_plan_error(exc: Exception) -> str:
    """Why a trace failed, as a plan's note says it."""
    return str(exc) if isinstance(exc, TraceBudgetExceeded) else type(exc).__name__


def memory_plan(
    problem: Problem, scale: str = "full", capacity: float | None = None
) -> MemoryPlan:
    """The plan on a card of ``capacity`` bytes (None: the anchor on the device): from the
    stored plans when their entry matches the problem's files (:mod:`problems.memory_store`),
    else traced from shapes, else the measured GPU peak, else unknown."""
    from problems.memory_store import stored_entry

    entry = stored_entry(problem.path, problem.id, scale)
    if entry is not None:
        sizes, why, method, flops = entry.sizes, entry.error, "stored", entry.flops
    else:
        (sizes, why), method = traced_plan(problem, scale), "traced"
        flops = anchor_flops(problem, scale) if sizes is not None else None
    if sizes is not None:
        return placed_plan(sizes, capacity, flops, method=method)
    return measured_plan(problem.id, scale, why)


# the name the callers of the first planner used
MemoryNeed = MemoryPlan
memory_need = memory_plan
