"""Intra-chunk (diagonal-block) output of the Mamba2 SSD scan for Nemotron-3-Nano-30B (chunk
128, 32 heads of dimension 128, 8 B/C groups of state size 128; head h reads group h // 4),
bfloat16 inputs and output. Inputs: hidden_states [B, C, 128, 32, 128], A_cumsum [B, 32, C,
128], B and C [B, C, 128, 8, 128]. Despite its name, A_cumsum is used as per-step log decays:
the causal decay matrix of each chunk is L[i, j] = exp(A[j+1] + … + A[i]) for j ≤ i (1 on the
diagonal, 0 above it). Output Y_diag [B, C, 128, 32, 128] (bfloat16): Y_diag[l] = Σ_{s ≤ l}
(C_l · B_s) · L[l, s] · x_s per chunk and head, with C_l · B_s the dot product over the state
dimension of the head's group."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, rand, randn
from problems.spec import Cost, Workload

ID = "p65"
SLUG = "mamba2_intra_chunk_diagonal_nemotron_nano_bf16"
FAMILY = "Linear Attention"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L1/070_mamba2_fused_intra_chunk_diagonal_computation "
    "(nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8), workload record 9"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Record 9 (B 4 x 16 chunks, the largest; the public MetaKernelBench used record 7, "
    "16 x 1 chunk). Values re-drawn per seed; per-step log decays ~ U(-0.02, 0) as in the "
    "public recipe so decay spans the whole chunk. Upstream forms the product with a "
    "broadcast over the head dimension; this reference uses batched matrix products."
)
WORKLOAD = {"batch": 4, "chunks": 16, "chunk": 128, "heads": 32, "head_dim": 128, "groups": 8,
            "state": 128}
SMOKE = {"batch": 1, "chunks": 2, "chunk": 128, "heads": 8, "head_dim": 16, "groups": 2,
         "state": 16}
INPUTS = ("hidden_states", "A_cumsum", "B", "C")
OUTPUTS = ("Y_diag",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    bf = torch.bfloat16
    b, c, cs = w.batch, w.chunks, w.chunk
    return [
        randn(g, (b, c, cs, w.heads, w.head_dim), bf, device),
        rand(g, (b, w.heads, c, cs), bf, device, -0.02, 0.0),
        randn(g, (b, c, cs, w.groups, w.state), bf, device),
        randn(g, (b, c, cs, w.groups, w.state), bf, device),
    ]


def _decay(a: torch.Tensor, by_difference: bool = False) -> torch.Tensor:
    """exp of the segment sums of ``a`` [..., n] over its last axis: [..., n, n], causal."""
    n = a.shape[-1]
    keep = torch.tril(torch.ones(n, n, dtype=torch.bool, device=a.device))
    if by_difference:
        cum = a.cumsum(-1)
        seg = cum[..., :, None] - cum[..., None, :]
    else:
        strict = torch.tril(torch.ones(n, n, dtype=torch.bool, device=a.device), diagonal=-1)
        seg = a[..., None].expand(*a.shape, n).masked_fill(~strict, 0).cumsum(dim=-2)
    return torch.exp(seg.masked_fill(~keep, float("-inf")))


def _y_diag(hidden, a_cum, b_in, c_in, decay: bool = True, by_difference: bool = False):
    dt = compute_dtype(hidden, a_cum, b_in, c_in)
    heads, groups = hidden.shape[3], b_in.shape[3]
    scores = torch.einsum("bclgn,bcsgn->bgcls", c_in.to(dt), b_in.to(dt))
    scores = scores.repeat_interleave(heads // groups, dim=1)  # b h c l s
    n = hidden.shape[2]
    if decay:
        scores = scores * _decay(a_cum.to(dt), by_difference)
    else:
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool, device=hidden.device))
        scores = scores.masked_fill(~causal, 0)
    y = torch.einsum("bhcls,bcshp->bclhp", scores, hidden.to(dt))
    return y.to(hidden.dtype)


def reference(
    hidden_states: torch.Tensor, A_cumsum: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> torch.Tensor:
    return _y_diag(hidden_states, A_cumsum, B, C)


def dropped_term(hidden_states, A_cumsum, B, C) -> torch.Tensor:
    """Mutant: forgets the decay (plain causal mask)."""
    return _y_diag(hidden_states, A_cumsum, B, C, decay=False)


def reordered(hidden_states, A_cumsum, B, C) -> torch.Tensor:
    """Valid alternative: decay from differences of the running sum."""
    return _y_diag(hidden_states, A_cumsum, B, C, by_difference=True)


def cost(w: Workload) -> Cost:
    b, c, l, h, p, g, n = w.batch, w.chunks, w.chunk, w.heads, w.head_dim, w.groups, w.state
    flops = 2.0 * b * c * (g * l * l * n + h * l * l * p / 2)
    read = 2 * (b * c * l * h * p + b * h * c * l + 2 * b * c * l * g * n)
    return Cost(flops={"bf16": flops, "fp32": 3.0 * b * h * c * l * l},
                bytes=float(read + 2 * b * c * l * h * p))
