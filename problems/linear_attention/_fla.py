"""Shared pieces of the flash-linear-attention (fla) problems: input draws and normalisation."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from problems.common import randn


def log_decay_gate(
    g: torch.Generator, shape: tuple[int, ...], normalizer: float, device: str
) -> torch.Tensor:
    """Per-channel log-decay ``logsigmoid(N(0, 1)) / normalizer`` stored as bfloat16 (≤ 0)."""
    logits = randn(g, shape, torch.float32, device)
    return (F.logsigmoid(logits) / normalizer).to(torch.bfloat16)


def write_strength(g: torch.Generator, shape: tuple[int, ...], device: str) -> torch.Tensor:
    """Delta-rule write strength ``β = sigmoid(N(0, 1))`` stored as bfloat16, in (0, 1)."""
    return torch.sigmoid(randn(g, shape, torch.float32, device)).to(torch.bfloat16)


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / ‖x‖₂`` over the last axis (in ``x``'s dtype; the norm is clamped away from 0)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
