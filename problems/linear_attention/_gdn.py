"""Shared pieces of the FlashInfer gated-delta-net (GDN) problems (Qwen3-Next geometry).

State layout is "k-last": ``S[..., v, k]`` maps a key vector to a value vector by
``S @ k``. One recurrence step for a token with gate ``g`` and write strength ``β``::

    S ← g·S;   v_old = S k;   S ← S + β (v − v_old) kᵀ;   o = scale · S q
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from problems.common import randn


def gates(
    A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, b: torch.Tensor, dt: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token, per-head decay ``g = exp(−exp(A_log)·softplus(a + dt_bias))`` and ``β = σ(b)``."""
    g = torch.exp(-torch.exp(A_log.to(dt)) * F.softplus(a.to(dt) + dt_bias.to(dt)))
    return g, torch.sigmoid(b.to(dt))


def expand_heads(x: torch.Tensor, heads: int, dim: int) -> torch.Tensor:
    """Repeat each q/k head so that value head ``h`` reads q/k head ``h // (heads / x_heads)``."""
    return x.repeat_interleave(heads // x.shape[dim], dim=dim)


def step(
    S: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: ``S [..., V, K]``, ``q``/``k [..., K]``, ``v [..., V]``, ``g``/``beta [...]``.

    Returns the new state and the output ``[..., V]``.
    """
    S = S * g[..., None, None]
    v_old = torch.einsum("...vk,...k->...v", S, k)
    S = S + (beta[..., None] * (v - v_old))[..., :, None] * k[..., None, :]
    return S, scale * torch.einsum("...vk,...k->...v", S, q)


def step_remove_insert(
    S: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`step` written as "remove the old value, insert the blended one" (same maths)."""
    S = g[..., None, None] * S
    v_old = torch.einsum("...vk,...k->...v", S, k)
    v_new = beta[..., None] * v + (1 - beta[..., None]) * v_old
    S = S - v_old[..., :, None] * k[..., None, :] + v_new[..., :, None] * k[..., None, :]
    return S, torch.einsum("...vk,...k->...v", S, q) * scale


def shuffled_heads(g: torch.Generator, values: tuple[float, ...], device) -> torch.Tensor:
    """The captured per-head constants in a per-seed head order (float32)."""
    cpu = torch.Generator().manual_seed((g.initial_seed() * 104729 + 3) & 0x7FFF_FFFF_FFFF_FFFF)
    order = torch.randperm(len(values), generator=cpu)
    return torch.tensor(values, dtype=torch.float32)[order].to(device)


def gate_inputs(g: torch.Generator, shape, w, device) -> tuple[torch.Tensor, ...]:
    """``A_log``, ``a``, ``dt_bias``, ``b`` at the workload's captured values and scales."""
    A_log = shuffled_heads(g, w.A_log, device)
    dt_bias = shuffled_heads(g, w.dt_bias, device)
    a = randn(g, shape, torch.bfloat16, device, std=w.a_std, mean=w.a_mean)
    b = randn(g, shape, torch.bfloat16, device, std=w.b_std, mean=w.b_mean)
    return A_log, a, dt_bias, b
