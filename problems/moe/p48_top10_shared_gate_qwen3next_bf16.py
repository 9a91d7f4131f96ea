"""Qwen3-Next-80B sparse mixture-of-experts block: 512 experts, top-10 routing, expert and
shared-expert intermediate 512, hidden 2048, all bfloat16. Flatten hidden_states ([B, S, 2048])
to tokens; router_logits = tokens · router_weightᵀ ([B·S, 512]); probabilities =
softmax(router_logits); the 10 most probable experts are selected and their probabilities
renormalised to sum to 1. Each selected expert applies a SwiGLU MLP with weights in [out, in]
layout, down(silu(gate·x) ⊙ up·x) (expert_gate_proj / expert_up_proj [512, 512, 2048],
expert_down_proj [512, 2048, 512]), weighted by its routing weight. A shared expert (same MLP
with shared_gate_proj / shared_up_proj [512, 2048] and shared_down_proj [2048, 512]) is applied
to every token and scaled by the learned gate sigmoid(x · shared_expert_gate_weightᵀ)
(shared_expert_gate_weight [1, 2048]) before being added. Outputs: output (bfloat16
[B, S, 2048]) and router_logits (bfloat16 [B·S, 512])."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p48"
SLUG = "top10_shared_gate_qwen3next_bf16"
FAMILY = "MoE"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L2/061_sparse_moe_routing_and_experts "
    "(nvidia/Qwen3-Next-80B-A3B-Thinking-NVFP4), workload record 4"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Axes exact (64 x 613 tokens). Values re-drawn per seed, weights scaled by 1/sqrt(fan_in). "
    "Token rows whose 10th/11th router logits are within DECISION_MARGIN (a logit gap; "
    "softmax preserves order) are redrawn. Routing weights and the accumulation stay in the "
    "compute dtype (upstream rounds them to bfloat16)."
)
WORKLOAD = {
    "batch": 64,
    "seq_len": 613,
    "hidden": 2048,
    "experts": 512,
    "top_k": 10,
    "intermediate": 512,
    "shared_intermediate": 512,
}
SMOKE = {
    "batch": 2,
    "seq_len": 32,
    "hidden": 128,
    "experts": 64,
    "top_k": 10,
    "intermediate": 32,
    "shared_intermediate": 64,
}
INPUTS = (
    "hidden_states",
    "router_weight",
    "expert_gate_proj",
    "expert_up_proj",
    "expert_down_proj",
    "shared_gate_proj",
    "shared_up_proj",
    "shared_down_proj",
    "shared_expert_gate_weight",
)
OUTPUTS = ("output", "router_logits")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = 1e-3

_REDRAW_LIMIT = 16


def _unstable_rows(flat: torch.Tensor, router_weight: torch.Tensor) -> torch.Tensor:
    top = (flat.double() @ router_weight.double().t()).topk(WORKLOAD["top_k"] + 1, dim=-1).values
    return top[:, -2] - top[:, -1] < DECISION_MARGIN


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    t, h, e, i, si = w.batch * w.seq_len, w.hidden, w.experts, w.intermediate, w.shared_intermediate
    flat = randn(g, (t, h), torch.bfloat16, device)
    router_weight = randn(g, (e, h), torch.bfloat16, device, std=h**-0.5)
    for _ in range(_REDRAW_LIMIT):
        unstable = _unstable_rows(flat, router_weight)
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
        randn(g, (1, h), torch.bfloat16, device, std=h**-0.5),
    ]
    return [flat.view(w.batch, w.seq_len, h), router_weight, *weights]


def _swiglu(x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, wd: torch.Tensor, dt):
    return (torch.nn.functional.silu(x @ wg.to(dt).t()) * (x @ wu.to(dt).t())) @ wd.to(dt).t()


def _forward(inputs: tuple, gated: bool = True, reverse: bool = False):
    (hidden, router_weight, eg, eu, ed, sg, su, sd, shared_gate) = inputs
    dt = compute_dtype(hidden, router_weight, eg, eu, ed, sg, su, sd, shared_gate)
    b, s, h = hidden.shape
    x = hidden.reshape(b * s, h).to(dt)
    logits = x @ router_weight.to(dt).t()
    top = torch.softmax(logits, dim=-1).topk(WORKLOAD["top_k"], dim=-1)
    weights = top.values / top.values.sum(-1, keepdim=True)
    shared = _swiglu(x, sg, su, sd, dt)
    if gated:
        shared = shared * torch.sigmoid(x @ shared_gate.to(dt).t())
    out = shared
    experts = range(eg.shape[0] - 1, -1, -1) if reverse else range(eg.shape[0])
    for e in experts:
        tok, slot = torch.nonzero(top.indices == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        y = _swiglu(x[tok], eg[e], eu[e], ed[e], dt)
        out.index_add_(0, tok, y * weights[tok, slot, None])
    return out.view(b, s, h).to(hidden.dtype), logits.to(hidden.dtype)


def reference(
    hidden_states: torch.Tensor,
    router_weight: torch.Tensor,
    expert_gate_proj: torch.Tensor,
    expert_up_proj: torch.Tensor,
    expert_down_proj: torch.Tensor,
    shared_gate_proj: torch.Tensor,
    shared_up_proj: torch.Tensor,
    shared_down_proj: torch.Tensor,
    shared_expert_gate_weight: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward((
        hidden_states, router_weight, expert_gate_proj, expert_up_proj, expert_down_proj,
        shared_gate_proj, shared_up_proj, shared_down_proj, shared_expert_gate_weight,
    ))


def dropped_term(*inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mutant: forgets the sigmoid gate on the shared expert."""
    return _forward(tuple(inputs), gated=False)


def reordered(*inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid alternative: experts accumulated in reverse order."""
    return _forward(tuple(inputs), reverse=True)


def cost(w: Workload) -> Cost:
    t, h, e, k = w.batch * w.seq_len, w.hidden, w.experts, w.top_k
    i, si = w.intermediate, w.shared_intermediate
    bf16 = 2.0 * t * (3 * h * (k * i + si) + h * e + h)
    read = t * h * 2 + e * h * 2 + 3 * e * i * h * 2 + 3 * si * h * 2 + h * 2
    write = t * h * 2 + t * e * 2
    return Cost(flops={"bf16": bf16, "fp32": 4.0 * t * e}, bytes=float(read + write))
