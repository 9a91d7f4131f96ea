"""DeepSeek-V3 mixture-of-experts layer on one expert-parallel rank with FP8 block-scaled
weights. Routing (no auxiliary loss): scores = sigmoid(routing_logits) (float32 [T, 256]);
biased = scores + routing_bias (bfloat16 [256]); the 256 experts form 8 groups of 32, each
group scored by the sum of its two largest biased scores; the 4 best groups are kept and the 8
best biased scores inside them select the experts; each selected expert's weight is its
unbiased score divided by the sum of the 8 selected unbiased scores, times
routed_scaling_factor (2.5). Only the 32 local experts local_expert_offset … offset+31 are
computed here. Activations (hidden_states, float8_e4m3fn [T, 7168]) carry one float32 scale per
token and 128-channel block (hidden_states_scale [56, T], note the transposed layout); expert
weights are float8_e4m3fn with one float32 scale per 128×128 block: gemm1_weights [32, 4096,
7168] (rows 0–2047 are the up projection, rows 2048–4095 the gate) and gemm2_weights [32, 7168,
2048]. Each routed token computes down(silu(gate·x) · up·x) with dequantized operands, and the
output (bfloat16 [T, 7168]) is the routing-weighted sum over its local experts (zero for tokens
routed to no local expert)."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import compute_dtype, generator, rand, randn
from problems.spec import Cost, Workload

ID = "p44"
SLUG = "grouped_routing_block_scale_deepseek_fp8"
FAMILY = "MoE"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/moe/"
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048.json, "
    "workload record 5e8dc11c"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Dimensions, local expert offset and scaling factor as in the record. Routing logits are "
    "drawn per seed on the bfloat16 grid (mean -1.67, std 0.656, the record's moments); the "
    "bias is the record's (4.96875 on its listed experts, 4.9375 elsewhere). Rows whose group "
    "or expert selection is within DECISION_MARGIN of a tie are redrawn. FP8 values are "
    "standard normal and every block scale is uniform in [0, 1), as upstream draws them."
)
WORKLOAD: dict[str, Any] = {
    "tokens": 14107,
    "global_experts": 256,
    "local_experts": 32,
    "hidden": 7168,
    "intermediate": 2048,
    "top_k": 8,
    "groups": 8,
    "topk_groups": 4,
    "block": 128,
    "local_expert_offset": 32,
    "routed_scaling_factor": 2.5,
}
SMOKE = {
    "tokens": 128,
    "global_experts": 256,
    "local_experts": 8,
    "hidden": 256,
    "intermediate": 128,
    "top_k": 8,
    "groups": 8,
    "topk_groups": 4,
    "block": 128,
    "local_expert_offset": 32,
    "routed_scaling_factor": 2.5,
}
INPUTS = (
    "routing_logits",
    "routing_bias",
    "hidden_states",
    "hidden_states_scale",
    "gemm1_weights",
    "gemm1_weights_scale",
    "gemm2_weights",
    "gemm2_weights_scale",
    "local_expert_offset",
    "routed_scaling_factor",
)
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = 1e-4

_LOGITS_MEAN = -1.6706
_LOGITS_STD = 0.6560
_BIAS_LEVELS = (4.9375, 4.96875)
# Experts the record biases at the high level (the rest take the low level).
_BIAS_HIGH_EXPERTS = (
    3, 6, 7, 9, 10, 11, 16, 17, 18, 23, 30, 31, 36, 37, 41, 42, 43, 44, 46, 47, 48, 49, 54, 55,
    56, 58, 61, 62, 63, 66, 67, 68, 69, 72, 74, 75, 79, 80, 81, 82, 83, 84, 87, 90, 92, 96, 100,
    101, 102, 104, 105, 108, 109, 110, 112, 114, 119, 120, 123, 125, 126, 127, 131, 136, 147, 151,
    152, 153, 154, 157, 159, 167, 170, 171, 174, 183, 185, 195, 196, 197, 200, 203, 214, 216, 217,
    219, 222, 223, 226, 230, 231, 234, 235, 236, 237, 238, 240, 241, 242, 243, 253,
)
_REDRAW_LIMIT = 16
_FP8 = torch.float8_e4m3fn


def _select(biased: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group-limited top-k on biased scores: (experts [T, k], group scores, kept-expert mask)."""
    tokens, experts = biased.shape
    groups, top_k = WORKLOAD["groups"], WORKLOAD["top_k"]
    per_group = experts // groups
    group_scores = biased.view(tokens, groups, per_group).topk(2, dim=-1).values.sum(-1)
    top_groups = group_scores.topk(WORKLOAD["topk_groups"], dim=-1).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, top_groups, True)
    keep = keep.repeat_interleave(per_group, dim=1)
    masked = biased.masked_fill(~keep, float("-inf"))
    return masked.topk(top_k, dim=-1).indices, group_scores, masked


def _route(logits: torch.Tensor, bias: torch.Tensor, scale: float, dt: torch.dtype):
    """Selected experts [T, k] and their normalised, scaled routing weights [T, k]."""
    scores = torch.sigmoid(logits.to(dt))
    experts, _, _ = _select(scores + bias.to(dt))
    weights = scores.gather(1, experts)
    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20) * scale
    return experts, weights


def _unstable_rows(logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Rows whose 4th/5th group scores or 8th/9th kept expert scores are closer than the margin."""
    biased = torch.sigmoid(logits.double()) + bias.double()
    _, group_scores, masked = _select(biased)
    k_groups, top_k = WORKLOAD["topk_groups"], WORKLOAD["top_k"]
    g = group_scores.topk(k_groups + 1, dim=-1).values
    e = masked.topk(top_k + 1, dim=-1).values
    group_gap = g[:, k_groups - 1] - g[:, k_groups]
    expert_gap = e[:, top_k - 1] - e[:, top_k]
    return (group_gap < DECISION_MARGIN) | (expert_gap < DECISION_MARGIN)


def _draw_logits(g: torch.Generator, rows: int, experts: int, device: str) -> torch.Tensor:
    logits = randn(g, (rows, experts), torch.float32, device, std=_LOGITS_STD, mean=_LOGITS_MEAN)
    return logits.to(torch.bfloat16).to(torch.float32)


def _fp8(g: torch.Generator, shape: tuple[int, ...], device: str) -> torch.Tensor:
    return randn(g, shape, torch.float32, device).to(_FP8)


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    e_glob, e_loc, h, i, blk = w.global_experts, w.local_experts, w.hidden, w.intermediate, w.block
    bias = torch.full((e_glob,), _BIAS_LEVELS[0], device=device, dtype=torch.bfloat16)
    bias[[e for e in _BIAS_HIGH_EXPERTS if e < e_glob]] = _BIAS_LEVELS[1]
    logits = _draw_logits(g, w.tokens, e_glob, device)
    for _ in range(_REDRAW_LIMIT):
        unstable = _unstable_rows(logits, bias)
        count = int(unstable.sum())
        if count == 0:
            break
        logits[unstable] = _draw_logits(g, count, e_glob, device)
    else:
        raise ValueError(f"routing margins under {DECISION_MARGIN} persist after redraws")
    hidden = _fp8(g, (w.tokens, h), device)
    hidden_scale = rand(g, (h // blk, w.tokens), torch.float32, device)
    w1 = _fp8(g, (e_loc, 2 * i, h), device)
    w1_scale = rand(g, (e_loc, 2 * i // blk, h // blk), torch.float32, device)
    w2 = _fp8(g, (e_loc, h, i), device)
    w2_scale = rand(g, (e_loc, h // blk, i // blk), torch.float32, device)
    return [
        logits, bias, hidden, hidden_scale, w1, w1_scale, w2, w2_scale,
        int(w.local_expert_offset), float(w.routed_scaling_factor),
    ]


def _dequant_blocks(q: torch.Tensor, scale: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """A 2-D fp8 matrix times its per-128×128-block scales, in ``dt``."""
    rows, cols = q.shape
    blk = WORKLOAD["block"]
    blocks = q.to(dt).view(rows // blk, blk, cols // blk, blk)
    return (blocks * scale.to(dt)[:, None, :, None]).view(rows, cols)


def _moe(inputs: tuple, scale_factor: float, reorder: bool = False) -> torch.Tensor:
    (logits, bias, hidden, hidden_scale, w1, w1_scale, w2, w2_scale, offset, _) = inputs
    dt = compute_dtype(logits, bias, hidden_scale, w1_scale, w2_scale)
    tokens, h = hidden.shape
    inter = w2.shape[2]
    blk = WORKLOAD["block"]
    experts, weights = _route(logits, bias, scale_factor, dt)
    act_scale = hidden_scale.to(dt).t()
    act = (hidden.to(dt).view(tokens, h // blk, blk) * act_scale[:, :, None]).view(tokens, h)
    out = torch.zeros(tokens, h, dtype=dt, device=hidden.device)
    order = range(w1.shape[0] - 1, -1, -1) if reorder else range(w1.shape[0])
    for local in order:
        tok, slot = torch.nonzero(experts == offset + local, as_tuple=True)
        if tok.numel() == 0:
            continue
        if reorder:
            proj = _blockwise_matmul(hidden[tok], act_scale[tok], w1[local], w1_scale[local], dt)
        else:
            proj = act[tok] @ _dequant_blocks(w1[local], w1_scale[local], dt).t()
        up, gate = proj[:, :inter], proj[:, inter:]
        mid = torch.nn.functional.silu(gate) * up
        y = mid @ _dequant_blocks(w2[local], w2_scale[local], dt).t()
        out.index_add_(0, tok, y * weights[tok, slot, None])
    return out.to(bias.dtype)


def _blockwise_matmul(
    xq: torch.Tensor, x_scale: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor, dt
) -> torch.Tensor:
    """x·Wᵀ accumulated per 128-wide K block, scales applied to each block's partial sum."""
    blk = WORKLOAD["block"]
    n, k = xq.shape
    rows = wq.shape[0]
    xb = xq.to(dt).view(n, k // blk, blk)
    wb = wq.to(dt).view(rows // blk, blk, k // blk, blk)
    partial = torch.einsum("nkc,pjkc->npjk", xb, wb)
    scaled = partial * x_scale[:, None, None, :] * w_scale.to(dt)[None, :, None, :]
    return scaled.sum(-1).reshape(n, rows)


def reference(
    routing_logits: torch.Tensor,
    routing_bias: torch.Tensor,
    hidden_states: torch.Tensor,
    hidden_states_scale: torch.Tensor,
    gemm1_weights: torch.Tensor,
    gemm1_weights_scale: torch.Tensor,
    gemm2_weights: torch.Tensor,
    gemm2_weights_scale: torch.Tensor,
    local_expert_offset: int,
    routed_scaling_factor: float,
) -> torch.Tensor:
    args = (
        routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
        gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, local_expert_offset, None,
    )
    return _moe(args, routed_scaling_factor)


def dropped_term(*inputs) -> torch.Tensor:
    """Mutant: forgets the routed scaling factor."""
    return _moe(tuple(inputs), 1.0)


def reordered(*inputs) -> torch.Tensor:
    """Valid alternative: experts in reverse order, GEMM1 accumulated per scaled K block."""
    return _moe(tuple(inputs), inputs[-1], reorder=True)


def cost(w: Workload) -> Cost:
    t, h, i, blk = w.tokens, w.hidden, w.intermediate, w.block
    routed = t * w.top_k * w.local_experts / w.global_experts  # expected local assignments
    gemm = 2.0 * routed * (h * 2 * i + i * h)
    read = (
        t * w.global_experts * 4 + w.global_experts * 2 + t * h + (h // blk) * t * 4
        + w.local_experts * (3 * i * h + 3 * (i // blk) * (h // blk) * 4)
    )
    return Cost(flops={"fp8": gemm, "fp32": routed * 4.0 * i}, bytes=float(read + t * h * 2))
