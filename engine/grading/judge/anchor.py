"""The float64 anchor check with only what it needs on the device.

A checked draw (its inputs and the judge's copy of the outputs) waits on the host while the
references run, unless the grading's plan keeps it on the device (``job["draw"] ==
"device"``, :func:`problems.memory_model.placed_plan`: it fits the card so, and the inputs'
host round trip is gone); each reference run gets a fresh device copy of the inputs (the
anchor's promoted to float64 one leaf at a time) and its outputs go to the host as soon as it
returns (or stay on the device with the draw);
the three outputs (candidate ``u``, reference ``v``, anchor ``z``) are then compared on the
device :data:`problems.memory.COMPARE_CHUNK_ELEMENTS` elements at a time. The figures are
those of :func:`problems.compare.check_outputs` (maxima, equalities and counts do not depend
on the chunking); on the CPU the host is the device and nothing moves.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from problems.compare import (
    ALLOWANCE_FACTOR,
    ANCHOR_DTYPES,
    LeafCheck,
    is_discrete,
    leaves,
    reference_numerics,
    structure_mismatch,
)
from problems.memory_model import COMPARE_CHUNK_ELEMENTS


def to_host(value: Any) -> Any:
    """``value`` with its tensors on the host (CPU tensors are kept as they are)."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.to("cpu")
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v) for v in value)
    return value


def device_copies(value: Any, device: str, promote: bool) -> Any:
    """Fresh copies of ``value``'s tensors on ``device`` (a reference may write its inputs),
    float32/16/bf16 ones in float64 when ``promote``: one leaf at a time."""
    if isinstance(value, torch.Tensor):
        copy = value.to(device, copy=True)
        return copy.double() if promote and copy.dtype in ANCHOR_DTYPES else copy
    if isinstance(value, (list, tuple)):
        return type(value)(device_copies(v, device, promote) for v in value)
    return value


def stand_ins(value: Any) -> Any:
    """``value``'s structure with each tensor as a zero-stride tensor of its dtype, shape and
    device (what the structure check reads, without the memory)."""
    if isinstance(value, torch.Tensor):
        return torch.zeros((), dtype=value.dtype, device=value.device).expand(value.shape)
    if isinstance(value, (list, tuple)):
        return type(value)(stand_ins(v) for v in value)
    return value


def run_reference(
    reference: Callable[..., Any],
    inputs: list[Any],
    device: str,
    promote: bool,
    keep_on_device: bool = False,
) -> tuple[Any, Any]:
    """One reference run on fresh device copies of ``inputs``: (its outputs, on the host
    unless ``keep_on_device``; their stand-ins on the device)."""
    with reference_numerics():
        out = reference(*device_copies(inputs, device, promote))
    shapes = stand_ins(out)
    return (out if keep_on_device else to_host(out)), shapes


def check_anchor(
    reference: Callable[..., Any],
    u: Any,
    u_shapes: Any,
    pristine: list[Any],
    device: str,
    anchor_device: str | None = None,
    resident: bool = False,
) -> tuple[bool, str | None, list[LeafCheck]]:
    """:func:`problems.compare.check_outputs` of the outputs ``u`` of the inputs
    ``pristine`` (both on the host, or with ``resident`` both on the device, where the
    reference's outputs then stay too; ``u_shapes``: :func:`stand_ins` of ``u`` taken on the
    device) against the reference and the float64 anchor, the anchor run on
    ``anchor_device`` ("cpu": the host, where the grading's plan does not fit the card with
    the anchor on it; the same float64 reference and tolerances) or else on ``device``."""
    v, v_shapes = run_reference(reference, pristine, device, False, keep_on_device=resident)
    mismatch = structure_mismatch(u_shapes, v_shapes)
    if mismatch:
        return False, mismatch, []
    del v_shapes
    with host_threads() if anchor_device == "cpu" else contextlib.nullcontext():
        z, _ = run_reference(
            reference, pristine, anchor_device or device, True, keep_on_device=resident
        )
    results = [
        check_leaf(i, a, b, c, device)
        for i, (a, b, c) in enumerate(zip(leaves(u), leaves(v), leaves(z)))
    ]
    return all(r.passed for r in results), None, results


@contextlib.contextmanager
def host_threads() -> Iterator[None]:
    """torch's CPU threads, for a host anchor, as many as the CPUs this process may use (a
    GPU slot's judge is placed on its share of the host, :mod:`.placement`)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _chunks(device: str, *tensors: torch.Tensor, chunk: int) -> Iterator[list[torch.Tensor]]:
    flats = [t.reshape(-1) for t in tensors]
    n = flats[0].numel()
    for start in range(0, n, chunk):
        yield [f[start : start + chunk].to(device) for f in flats]


def equal_bytes(a: torch.Tensor, b: torch.Tensor, chunk: int = 4 * COMPARE_CHUNK_ELEMENTS) -> bool:
    """``torch.equal`` of two flat byte tensors of one device, a chunk at a time (a whole
    comparison on a GPU allocates a mask as large as its operands)."""
    if a.numel() != b.numel():
        return False
    return all(torch.equal(a[i : i + chunk], b[i : i + chunk]) for i in range(0, a.numel(), chunk))


def check_leaf(
    index: int, u: Any, v: Any, z: Any, device: str, chunk: int = COMPARE_CHUNK_ELEMENTS
) -> LeafCheck:
    """:func:`problems.compare.check_leaf` on host tensors, compared on ``device`` in chunks
    (the structure of ``u`` already checked)."""
    if not isinstance(v, torch.Tensor):
        ok = type(u) is type(v) and u == v
        return LeafCheck(index, ok, "exact", detail="" if ok else f"expected {v!r}, got {u!r}")
    if is_discrete(v.dtype):
        wrong = 0
        for a, b in _chunks(device, u, v, chunk=chunk):
            if v.dtype.is_floating_point:
                a, b = a.view(torch.uint8), b.view(torch.uint8)
            wrong += int((a != b).sum())
        equal = wrong == 0
        return LeafCheck(index, equal, "exact", detail="" if equal else f"{wrong} elements differ")
    allowance, ref_err, max_z = _allowance(v, z, device, chunk)
    figures = (allowance, ref_err, max_z)
    nan = inf_differ = inf_where_finite = False
    err, any_finite = 0.0, False
    for a, c in _chunks(device, u, z, chunk=chunk):
        u64, z64 = a.detach().double(), c.double()
        finite = torch.isfinite(z64)
        nan = nan or bool(torch.isnan(u64).any())
        inf_differ = inf_differ or not torch.equal(u64[~finite], z64[~finite])
        uf = u64[finite]
        inf_where_finite = inf_where_finite or not bool(torch.isfinite(uf).all())
        if uf.numel():
            err = max(err, float((uf - z64[finite]).abs().max()))
            any_finite = True
    if nan:
        return LeafCheck(index, False, "float", math.nan, *figures, "NaN in output")
    if inf_differ:
        detail = "infinite positions differ from the anchor"
        return LeafCheck(index, False, "float", math.inf, *figures, detail)
    if inf_where_finite:
        detail = "infinite value where the anchor is finite"
        return LeafCheck(index, False, "float", math.inf, *figures, detail)
    err = err if any_finite else 0.0
    ok = err <= allowance
    detail = "" if ok else f"max error {err:.3e} exceeds allowance {allowance:.3e}"
    return LeafCheck(index, ok, "float", err, allowance, ref_err, max_z, detail)


def _allowance(
    v: torch.Tensor, z: torch.Tensor, device: str, chunk: int
) -> tuple[float, float, float]:
    """:func:`problems.compare.allowance_for`, a chunk at a time."""
    any_finite, ref_err, max_z = False, 0.0, 0.0
    for b, c in _chunks(device, v, z, chunk=chunk):
        z64, v64 = c.double(), b.double()
        finite = torch.isfinite(z64)
        if not bool(finite.any()):
            continue
        any_finite = True
        zf, vf = z64[finite], v64[finite]
        if not bool(torch.isfinite(vf).all()):
            raise ValueError(
                "the eager reference overflowed where the anchor is finite: fix the input generator"
            )
        ref_err = max(ref_err, float((vf - zf).abs().max()))
        max_z = max(max_z, float(zf.abs().max()))
    if not any_finite:
        return 0.0, 0.0, 0.0
    floor = torch.finfo(v.dtype).eps * max_z
    return ALLOWANCE_FACTOR * max(ref_err, floor), ref_err, max_z
