"""Mutated outputs used by validation to prove that the tolerance rule discriminates.

Each builder returns an output structure shaped like the reference's (or deliberately not),
which :func:`problems.compare.check_outputs` must reject ("must fail") or accept ("must pass").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from problems.common import compute_floor
from problems.compare import bit_pattern, clone_inputs, is_discrete, leaves, reference_numerics


def rebuild(template: Any, items: Sequence[Any]) -> Any:
    """An output with ``template``'s container (tensor or tuple/list) holding ``items``."""
    if isinstance(template, (list, tuple)):
        return type(template)(items)
    return items[0]


def is_float_leaf(value: Any) -> bool:
    """A floating tensor that the anchored tolerance applies to (not fp8/fp4)."""
    return (
        isinstance(value, torch.Tensor)
        and value.dtype.is_floating_point
        and not is_discrete(value.dtype)
    )


def outputs_equal(a: Any, b: Any) -> bool:
    """Exact equality of two output structures (bit patterns for floats)."""
    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
                return False
            if x.dtype.is_floating_point:
                if not torch.equal(bit_pattern(x), bit_pattern(y)):
                    return False
            elif not torch.equal(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def zeroed(v: Any, index: int) -> Any:
    """``v`` with leaf ``index`` replaced by zeros (other leaves kept)."""
    items = list(leaves(v))
    items[index] = torch.zeros_like(items[index])
    return rebuild(v, items)


def echoed_input(v: Any, inputs: Sequence[Any]) -> Any | None:
    """The first tensor input returned in place of every output (None without tensor inputs)."""
    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    if first is None:
        return None
    return rebuild(v, [first.clone() for _ in leaves(v)])


def rounded_anchor(z: Any, v: Any) -> Any:
    """The anchor rounded to the reference's output dtypes."""
    items = [
        a.to(b.dtype) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else a
        for a, b in zip(leaves(z), leaves(v))
    ]
    return rebuild(v, items)


_LOW_PRECISION_SOURCES = (torch.float32, torch.float16)


def bf16_accumulation(reference: Callable[..., Any], inputs: Sequence[Any], v: Any) -> Any:
    """The reference computed in bfloat16: float32/float16 inputs cast to bfloat16, the compute
    floor lowered to bfloat16, float outputs cast back to the reference's output dtypes."""

    def lower(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype in _LOW_PRECISION_SOURCES:
            return x.to(torch.bfloat16)
        if isinstance(x, (list, tuple)):
            return type(x)(lower(y) for y in x)
        return x

    lowered = [lower(x) for x in clone_inputs(inputs)]
    with reference_numerics(), compute_floor(torch.bfloat16):
        out = reference(*lowered)
    items = [
        a.to(b.dtype) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else a
        for a, b in zip(leaves(out), leaves(v))
    ]
    if len(items) != len(leaves(v)):
        return out
    return rebuild(v, items)
