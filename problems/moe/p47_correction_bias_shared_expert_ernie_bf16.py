"""ERNIE-4.5-300B mixture-of-experts layer with an expert-score correction bias and a shared
expert (hidden 8192, 64 experts, top-8, expert intermediate 3584, shared intermediate 7168).
Flatten hidden_states (bfloat16 [B, S, 8192]) to tokens; router_logits = tokens · gate_weightᵀ
in float32 (gate_weight float32 [64, 8192]); probabilities = softmax(router_logits); biased =
probabilities + e_score_correction_bias (float32 [1, 64]); the 8 experts with the largest
biased values are selected and their routing weights are those biased values divided by
max(their sum, norm_min). Each selected expert applies a SwiGLU MLP with weights in [out, in]
layout, down(silu(gate·x) ⊙ up·x): expert_gate_proj / expert_up_proj [64, 3584, 8192],
expert_down_proj [64, 8192, 3584]; the shared expert (shared_gate_proj / shared_up_proj [7168,
8192], shared_down_proj [8192, 7168]) is applied to every token and added. Outputs: output
(bfloat16 [B, S, 8192]) and router_logits (float32 [B·S, 64])."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p47"
SLUG = "correction_bias_shared_expert_ernie_bf16"
FAMILY = "MoE"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L2/029_moe_sparse_routing_and_dispatch "
    "(baidu/ERNIE-4.5-300B-A47B-PT), workload record 5"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Axes exact (64 x 128 tokens). Values re-drawn per seed; weights scaled by 1/sqrt(fan_in) "
    "and the correction bias drawn at the softmax-probability scale (std 1/64) so both steer "
    "the selection. Token rows whose 8th/9th biased scores are within DECISION_MARGIN are "
    "redrawn. Routing weights are kept in the compute dtype (upstream rounds them to bfloat16)."
)
WORKLOAD: dict[str, Any] = {
    "batch": 64,
    "seq_len": 128,
    "hidden": 8192,
    "experts": 64,
    "top_k": 8,
    "intermediate": 3584,
    "shared_intermediate": 7168,
    "norm_min": 1e-10,
}
SMOKE = {
    "batch": 2,
    "seq_len": 32,
    "hidden": 128,
    "experts": 32,
    "top_k": 8,
    "intermediate": 64,
    "shared_intermediate": 128,
    "norm_min": 1e-10,
}
INPUTS = (
    "hidden_states",
    "gate_weight",
    "e_score_correction_bias",
    "expert_gate_proj",
    "expert_up_proj",
    "expert_down_proj",
    "shared_gate_proj",
    "shared_up_proj",
    "shared_down_proj",
    "norm_min",
)
OUTPUTS = ("output", "router_logits")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = 1e-4

_REDRAW_LIMIT = 16


def _unstable_rows(flat: torch.Tensor, gate_weight: torch.Tensor, bias: torch.Tensor):
    probs = torch.softmax(flat.double() @ gate_weight.double().t(), dim=-1)
    top = (probs + bias.double()).topk(WORKLOAD["top_k"] + 1, dim=-1).values
    return top[:, -2] - top[:, -1] < DECISION_MARGIN


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    t, h, e, i, si = w.batch * w.seq_len, w.hidden, w.experts, w.intermediate, w.shared_intermediate
    flat = randn(g, (t, h), torch.bfloat16, device)
    gate_weight = randn(g, (e, h), torch.float32, device, std=h**-0.5)
    bias = randn(g, (1, e), torch.float32, device, std=1.0 / e)
    for _ in range(_REDRAW_LIMIT):
        unstable = _unstable_rows(flat, gate_weight, bias)
        count = int(unstable.sum())
        if count == 0:
            break
        flat[unstable] = randn(g, (count, h), torch.bfloat16, device)
    else:
        raise ValueError(f"routing margins under {DECISION_MARGIN} persist after redraws")
    weights = [
        randn(g, (e, i, h), torch.bfloat16, device, std=h**-0.5),
        randn(g, (e, i, h), torch.bfloat16, device, std=h**-0.5),
        randn(g, (e, h, i), torch.bfloat16, device, std=i**-0.5),
        randn(g, (si, h), torch.bfloat16, device, std=h**-0.5),
        randn(g, (si, h), torch.bfloat16, device, std=h**-0.5),
        randn(g, (h, si), torch.bfloat16, device, std=si**-0.5),
    ]
    hidden = flat.view(w.batch, w.seq_len, h)
    return [hidden, gate_weight, bias, *weights, float(w.norm_min)]


def _swiglu(x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, wd: torch.Tensor, dt):
    return (torch.nn.functional.silu(x @ wg.to(dt).t()) * (x @ wu.to(dt).t())) @ wd.to(dt).t()


def _forward(inputs: tuple, shared: bool = True, reverse: bool = False):
    (hidden, gate_weight, bias, eg, eu, ed, sg, su, sd, norm_min) = inputs
    dt = compute_dtype(hidden, gate_weight, bias, eg, eu, ed, sg, su, sd)
    b, s, h = hidden.shape
    x = hidden.reshape(b * s, h).to(dt)
    logits = x @ gate_weight.to(dt).t()
    biased = torch.softmax(logits, dim=-1) + bias.to(dt)
    chosen = biased.topk(WORKLOAD["top_k"], dim=-1).indices
    weights = biased.gather(1, chosen)
    weights = weights / weights.sum(-1, keepdim=True).clamp(min=norm_min)
    out = _swiglu(x, sg, su, sd, dt) if shared else torch.zeros_like(x)
    experts = range(eg.shape[0] - 1, -1, -1) if reverse else range(eg.shape[0])
    for e in experts:
        tok, slot = torch.nonzero(chosen == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        y = _swiglu(x[tok], eg[e], eu[e], ed[e], dt)
        out.index_add_(0, tok, y * weights[tok, slot, None])
    return out.view(b, s, h).to(hidden.dtype), logits.to(gate_weight.dtype)


def reference(
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    e_score_correction_bias: torch.Tensor,
    expert_gate_proj: torch.Tensor,
    expert_up_proj: torch.Tensor,
    expert_down_proj: torch.Tensor,
    shared_gate_proj: torch.Tensor,
    shared_up_proj: torch.Tensor,
    shared_down_proj: torch.Tensor,
    norm_min: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward((
        hidden_states, gate_weight, e_score_correction_bias, expert_gate_proj, expert_up_proj,
        expert_down_proj, shared_gate_proj, shared_up_proj, shared_down_proj, norm_min,
    ))


def dropped_term(*inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Mutant: forgets the shared expert."""
    return _forward(tuple(inputs), shared=False)


def reordered(*inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid alternative: experts accumulated in reverse order."""
    return _forward(tuple(inputs), reverse=True)


def cost(w: Workload) -> Cost:
    t, h, e, k = w.batch * w.seq_len, w.hidden, w.experts, w.top_k
    i, si = w.intermediate, w.shared_intermediate
    bf16 = 2.0 * t * 3 * h * (k * i + si)
    read = t * h * 2 + e * h * 4 + e * 4 + 3 * e * i * h * 2 + 3 * si * h * 2
    write = t * h * 2 + t * e * 4
    return Cost(flops={"bf16": bf16, "fp32": 2.0 * t * h * e}, bytes=float(read + write))
