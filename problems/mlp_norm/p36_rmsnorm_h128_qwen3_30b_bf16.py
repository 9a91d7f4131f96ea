"""RMSNorm over 128-channel rows in bfloat16, as Qwen3-30B-A3B applies it to every query and key
head (q/k norm): each row is divided by the root mean square of its 128 values (eps 1e-6) and
scaled by a learned per-channel weight. Rows are many and short (520,128 × 128), so the kernel
is purely memory-bound; input, weight and output are bfloat16."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p36"
SLUG = "rmsnorm_h128_qwen3_30b_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/rmsnorm/rmsnorm_h128.json, "
    "workload record f2872f89"
)
LICENSE = "Apache-2.0"
NOTES = "The weight is drawn as 1 + 0.1·N(0, 1) so that the scale matters."
WORKLOAD = {"rows": 520128, "hidden": 128, "eps": 1e-6}
SMOKE = {"rows": 1000, "hidden": 128, "eps": 1e-6}
INPUTS = ("hidden_states", "weight")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = randn(g, (w.rows, w.hidden), torch.bfloat16, device)
    weight = randn(g, (w.hidden,), torch.bfloat16, device, std=0.1, mean=1.0)
    return [x, weight]


def reference(hidden_states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    dt = compute_dtype(hidden_states, weight)
    x = hidden_states.to(dt)
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + WORKLOAD["eps"])
    return (x * inv * weight.to(dt)).to(hidden_states.dtype)


def dropped_term(hidden_states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Mutant: forgets the learned weight."""
    dt = compute_dtype(hidden_states, weight)
    x = hidden_states.to(dt)
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + WORKLOAD["eps"])
    return (x * inv).to(hidden_states.dtype)


def reordered(hidden_states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Valid alternative: sum of squares by a dot product, weight applied first."""
    dt = compute_dtype(hidden_states, weight)
    x = hidden_states.to(dt)
    ss = (x.unsqueeze(-2) @ x.unsqueeze(-1)).squeeze(-1)
    inv = 1.0 / torch.sqrt(ss / x.shape[-1] + WORKLOAD["eps"])
    return ((x * weight.to(dt)) * inv).to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    elems = w.rows * w.hidden
    return Cost(flops={"fp32": 4.0 * elems}, bytes=2.0 * (2 * elems + w.hidden))
