"""The float64-anchored correctness rule shared by validation and grading.

For every floating output leaf, with ε = ``finfo(dtype).eps``, z the anchor (the reference
on inputs promoted to float64), v the reference at original dtypes and u the candidate::

    max|u − z| ≤ 3 · max( max|v − z| , ε · max|z| )     over finite positions of z

where z is ±inf, u must equal it; NaN always fails. Integer, bool and fp8/fp4 outputs must
equal v exactly (fp8 compared as bit patterns). Structure must match exactly.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

ALLOWANCE_FACTOR = 3.0
ANCHOR_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_BIT_EXACT_FLOATS = {
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    *(
        [getattr(torch, "float4_e2m1fn_x2")]  # noqa: B009 - absent in old torch
        if hasattr(torch, "float4_e2m1fn_x2")
        else []
    ),
}


def is_discrete(dtype: torch.dtype) -> bool:
    """Outputs compared exactly: integers, bools, fp8/fp4 bit patterns."""
    return (not dtype.is_floating_point and not dtype.is_complex) or dtype in _BIT_EXACT_FLOATS


def bit_pattern(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t`` as a flat uint8 tensor (0-dim and strided tensors included)."""
    return t.reshape(-1).view(torch.uint8)


def promote(value: Any) -> Any:
    """Cast float32/float16/bfloat16 tensors (recursively in lists/tuples) to float64."""
    if isinstance(value, torch.Tensor):
        return value.double() if value.dtype in ANCHOR_DTYPES else value
    if isinstance(value, (list, tuple)):
        return type(value)(promote(v) for v in value)
    return value


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """Private copies of the inputs (tensors cloned, containers rebuilt)."""

    def clone(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.clone()
        if isinstance(v, (list, tuple)):
            return type(v)(clone(x) for x in v)
        return v

    return [clone(v) for v in inputs]


def promoted_copies(inputs: Sequence[Any]) -> list[Any]:
    """``promote(clone_inputs(inputs))`` without the intermediate clone of float tensors:
    a float32/16/bf16 tensor is copied once, straight to float64; others are cloned."""

    def copy(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.double() if v.dtype in ANCHOR_DTYPES else v.clone()
        if isinstance(v, (list, tuple)):
            return type(v)(copy(x) for x in v)
        return v

    return [copy(v) for v in inputs]


@contextlib.contextmanager
def reference_numerics() -> Iterator[None]:
    """TF32 off, reduced-precision reductions off, highest fp32 matmul precision, fp32 default."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        torch.get_float32_matmul_precision(),
        torch.get_default_dtype(),
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.set_float32_matmul_precision("highest")
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            precision,
            default_dtype,
        ) = saved
        torch.set_float32_matmul_precision(precision)
        torch.set_default_dtype(default_dtype)


def reference_and_anchor(reference: Any, inputs: Sequence[Any]) -> tuple[Any, Any]:
    """Under reference numerics, on copies of ``inputs``: the reference's outputs at the
    inputs' own dtypes (``v``) and on float64-promoted inputs (``z``, the anchor)."""
    with reference_numerics():
        return reference(*clone_inputs(inputs)), reference(*promote(clone_inputs(inputs)))


def leaves(value: Any) -> list[Any]:
    """Flatten an output structure (tensor, or nested tuples/lists) into its leaves."""
    if isinstance(value, (list, tuple)):
        out: list[Any] = []
        for v in value:
            out.extend(leaves(v))
        return out
    return [value]


def structure_mismatch(u: Any, v: Any, path: str = "output") -> str | None:
    """A description of the first structural difference between ``u`` and ``v``, or None."""
    if isinstance(v, (list, tuple)):
        if type(u) is not type(v):
            return f"{path}: expected {type(v).__name__}, got {type(u).__name__}"
        if len(u) != len(v):
            return f"{path}: expected {len(v)} items, got {len(u)}"
        for i, (a, b) in enumerate(zip(u, v)):
            found = structure_mismatch(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(v, torch.Tensor):
        if type(u) is not torch.Tensor:
            return f"{path}: expected torch.Tensor, got {type(u).__module__}.{type(u).__name__}"
        if u.shape != v.shape:
            return f"{path}: expected shape {tuple(v.shape)}, got {tuple(u.shape)}"
        if u.dtype != v.dtype:
            return f"{path}: expected dtype {v.dtype}, got {u.dtype}"
        if u.device != v.device:
            return f"{path}: expected device {v.device}, got {u.device}"
        if u.layout != v.layout:
            return f"{path}: expected layout {v.layout}, got {u.layout}"
        return None
    if type(u) is not type(v) or u != v:
        return f"{path}: expected {v!r}, got {u!r}"
    return None


@dataclass
class LeafCheck:
    """The verdict on one output leaf for one draw."""

    index: int
    passed: bool
    kind: str  # "float", "exact" or "structure"
    max_error: float | None = None
    allowance: float | None = None
    reference_error: float | None = None
    max_abs_anchor: float | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def allowance_for(v: torch.Tensor, z: torch.Tensor) -> tuple[float, float, float]:
    """(allowance, reference error max|v−z|, max|z|) over the finite positions of z."""
    z64, v64 = z.double(), v.double()
    finite = torch.isfinite(z64)
    if not bool(finite.any()):
        return 0.0, 0.0, 0.0
    zf, vf = z64[finite], v64[finite]
    if not bool(torch.isfinite(vf).all()):
        raise ValueError(
            "the eager reference overflowed where the anchor is finite: fix the input generator"
        )
    ref_err = float((vf - zf).abs().max())
    max_z = float(zf.abs().max())
    floor = torch.finfo(v.dtype).eps * max_z
    return ALLOWANCE_FACTOR * max(ref_err, floor), ref_err, max_z


def check_leaf(index: int, u: Any, v: Any, z: Any) -> LeafCheck:
    """Apply the rule to one leaf (``u`` candidate, ``v`` reference, ``z`` anchor)."""
    if not isinstance(v, torch.Tensor):
        ok = type(u) is type(v) and u == v
        return LeafCheck(index, ok, "exact", detail="" if ok else f"expected {v!r}, got {u!r}")
    mismatch = structure_mismatch(u, v, f"output[{index}]")
    if mismatch:
        return LeafCheck(index, False, "structure", detail=mismatch)
    if is_discrete(v.dtype):
        a, b = (bit_pattern(u), bit_pattern(v)) if v.dtype.is_floating_point else (u, v)
        equal = bool(torch.equal(a, b))
        wrong = 0 if equal else int((a != b).sum())
        return LeafCheck(
            index, equal, "exact", detail="" if equal else f"{wrong} elements differ"
        )
    allowance, ref_err, max_z = allowance_for(v, z)
    u64, z64 = u.detach().double(), z.double()
    finite = torch.isfinite(z64)
    if bool(torch.isnan(u64).any()):
        return LeafCheck(
            index, False, "float", math.nan, allowance, ref_err, max_z, "NaN in output"
        )
    if not torch.equal(u64[~finite], z64[~finite]):
        return LeafCheck(
            index, False, "float", math.inf, allowance, ref_err, max_z,
            "infinite positions differ from the anchor",
        )
    uf = u64[finite]
    if not bool(torch.isfinite(uf).all()):
        return LeafCheck(
            index, False, "float", math.inf, allowance, ref_err, max_z,
            "infinite value where the anchor is finite",
        )
    err = float((uf - z64[finite]).abs().max()) if uf.numel() else 0.0
    ok = err <= allowance
    detail = "" if ok else f"max error {err:.3e} exceeds allowance {allowance:.3e}"
    return LeafCheck(index, ok, "float", err, allowance, ref_err, max_z, detail)


def check_outputs(u: Any, v: Any, z: Any) -> tuple[bool, str | None, list[LeafCheck]]:
    """Check a whole output structure: (passed, structure problem or None, per-leaf checks)."""
    mismatch = structure_mismatch(u, v)
    if mismatch:
        return False, mismatch, []
    results = [
        check_leaf(i, a, b, c) for i, (a, b, c) in enumerate(zip(leaves(u), leaves(v), leaves(z)))
    ]
    return all(r.passed for r in results), None, results
