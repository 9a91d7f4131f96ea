"""Helpers every problem module uses: compute dtype, seeded generators, margins.

References call :func:`compute_dtype` instead of hard-coding ``torch.float32`` so that
promoted float64 inputs give a true float64 anchor, and so that validation can lower the
floor to bfloat16 to build the "bf16 accumulation" mutant.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch

_COMPUTE_FLOOR: contextvars.ContextVar[torch.dtype] = contextvars.ContextVar(
    "mkb_compute_floor", default=torch.float32
)


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype a reference computes in: the widest of the inputs' float dtypes and the floor.

    The floor is float32 (so bf16/fp16 inputs compute in float32 and float64 inputs in
    float64). Validation lowers it with :func:`compute_floor` to prove the tolerance rejects
    low-precision accumulation.
    """
    dtype = _COMPUTE_FLOOR.get()
    for t in tensors:
        if t.dtype.is_floating_point and t.element_size() >= 2 and t.dtype not in _FP8:
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


@contextlib.contextmanager
def compute_floor(dtype: torch.dtype) -> Iterator[None]:
    """Temporarily change the minimum compute dtype used by :func:`compute_dtype`."""
    token = _COMPUTE_FLOOR.set(dtype)
    try:
        yield
    finally:
        _COMPUTE_FLOOR.reset(token)


_FP8 = {torch.float8_e4m3fn, torch.float8_e5m2}
FP8_E4M3_MAX = 448.0


def generator(seed: int, device: str | torch.device) -> torch.Generator:
    """A torch generator on ``device`` seeded with ``seed`` (values are device-specific)."""
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def randn(
    g: torch.Generator,
    shape: Sequence[int],
    dtype: torch.dtype,
    device: str | torch.device,
    std: float = 1.0,
    mean: float = 0.0,
) -> torch.Tensor:
    """Normal values drawn in float32 on ``device`` then cast to ``dtype``."""
    t = torch.randn(tuple(shape), generator=g, device=device, dtype=torch.float32)
    if std != 1.0:
        t.mul_(std)
    if mean != 0.0:
        t.add_(mean)
    return t.to(dtype)


def rand(
    g: torch.Generator,
    shape: Sequence[int],
    dtype: torch.dtype,
    device: str | torch.device,
    low: float = 0.0,
    high: float = 1.0,
) -> torch.Tensor:
    """Uniform values in ``[low, high)`` drawn in float32 then cast to ``dtype``."""
    t = torch.rand(tuple(shape), generator=g, device=device, dtype=torch.float32)
    return (t * (high - low) + low).to(dtype)


def randint(
    g: torch.Generator,
    low: int,
    high: int,
    shape: Sequence[int],
    device: str | torch.device,
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """Integers in ``[low, high)``."""
    return torch.randint(low, high, tuple(shape), generator=g, device=device, dtype=dtype)


def randperm(g: torch.Generator, n: int, device: str | torch.device) -> torch.Tensor:
    """A random permutation of ``range(n)`` (int64)."""
    return torch.randperm(n, generator=g, device=device)


def ragged_lengths(
    g: torch.Generator, total: int, count: int, minimum: int = 1
) -> list[int]:
    """``count`` positive lengths (each ≥ ``minimum``) that sum exactly to ``total``.

    Drawn on the CPU from ``g``'s seed so lengths do not depend on the device.
    """
    if count * minimum > total:
        raise ValueError(f"cannot split {total} into {count} parts of at least {minimum}")
    cpu = torch.Generator().manual_seed(g.initial_seed())
    weights = torch.rand(count, generator=cpu, dtype=torch.float64) + 0.05
    spare = total - count * minimum
    raw = (weights / weights.sum() * spare).floor().to(torch.int64)
    lengths = [minimum + int(x) for x in raw]
    remainder = total - sum(lengths)
    for i in range(remainder):
        lengths[i % count] += 1
    return lengths


def min_gap(values: torch.Tensor, dim: int = -1) -> float:
    """Smallest gap between consecutive sorted values along ``dim`` (for tie margins)."""
    s, _ = torch.sort(values.double(), dim=dim)
    gaps = s.diff(dim=dim)
    return float(gaps.min()) if gaps.numel() else math.inf


def topk_margin(scores: torch.Tensor, k: int, dim: int = -1) -> float:
    """Gap between the k-th and (k+1)-th largest values along ``dim`` (min over rows)."""
    top = torch.topk(scores.double(), k + 1, dim=dim).values
    kth = top.narrow(dim, k - 1, 1)
    nxt = top.narrow(dim, k, 1)
    return float((kth - nxt).min())


def device_of(inputs: Sequence[Any]) -> torch.device:
    """The device of the first tensor among ``inputs`` (CPU if there is none)."""
    for x in inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")
