"""Capacity-limited mixture-of-experts execution for Qwen3-Coder-480B (160 experts, 8 per
token, hidden 6144, expert intermediate 2560, all bfloat16). Every (token, slot) assignment in
selected_experts [T, 8] (int64, distinct experts per token) is dispatched to its expert in
token order (then slot order); each expert admits at most capacity = int(T·8/160·1.25)
assignments (the first ones in that order) and drops the rest. Each expert runs a SwiGLU MLP on
its admitted tokens with weights laid out [expert, in, out]: y = (silu(x·Wg) ⊙ (x·Wu))·Wd with
expert_gate_weights / expert_up_weights [160, 6144, 2560] and expert_down_weights [160, 2560,
6144]. The output [T, 6144] (bfloat16) is, per token, the sum over its admitted assignments of
routing_weights[token, slot] (bfloat16 [T, 8]) times the expert output; tokens whose every
assignment was dropped get zeros."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import compute_dtype, generator, rand, randn
from problems.spec import Cost, Workload

ID = "p45"
SLUG = "capacity_factor_expert_dispatch_qwen3_coder_480b_bf16"
FAMILY = "MoE"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L2/012_moe_expert_batched_execution_with_capacity_factor "
    "(Qwen/Qwen3-Coder-480B-A35B-Instruct), workload record 8"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Token count exact. Expert assignments are drawn per seed with a Gumbel top-k over "
    "popularity-skewed logits (popularity std 0.5) so that the capacity cutoff drops "
    "assignments in every draw; routing weights are a softmax over the 8 slots."
)
WORKLOAD: dict[str, Any] = {
    "tokens": 8192,
    "hidden": 6144,
    "intermediate": 2560,
    "experts": 160,
    "top_k": 8,
    "capacity_factor": 1.25,
}
SMOKE = {
    "tokens": 128,
    "hidden": 128,
    "intermediate": 64,
    "experts": 16,
    "top_k": 4,
    "capacity_factor": 1.25,
}
INPUTS = (
    "hidden_states",
    "selected_experts",
    "routing_weights",
    "expert_gate_weights",
    "expert_up_weights",
    "expert_down_weights",
)
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

_POPULARITY_STD = 0.5


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    t, h, i, e, k = w.tokens, w.hidden, w.intermediate, w.experts, w.top_k
    hidden = randn(g, (t, h), torch.bfloat16, device)
    popularity = randn(g, (e,), torch.float32, device, std=_POPULARITY_STD)
    uniform = rand(g, (t, e), torch.float32, device, 1e-6, 1.0)
    gumbel = -torch.log(-torch.log(uniform))
    selected = (popularity + gumbel).topk(k, dim=-1).indices
    weights = torch.softmax(randn(g, (t, k), torch.float32, device), dim=-1).to(torch.bfloat16)
    gate = randn(g, (e, h, i), torch.bfloat16, device, std=h**-0.5)
    up = randn(g, (e, h, i), torch.bfloat16, device, std=h**-0.5)
    down = randn(g, (e, i, h), torch.bfloat16, device, std=i**-0.5)
    return [hidden, selected, weights, gate, up, down]


def _admitted(selected: torch.Tensor, experts: int, limit: int | None):
    """Admitted assignments as (expert, position in expert batch, token, slot) index tensors."""
    tokens, k = selected.shape
    flat = selected.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    sorted_experts = flat[order]
    counts = torch.bincount(sorted_experts, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.arange(flat.numel(), device=flat.device) - starts[sorted_experts]
    keep = position < limit if limit is not None else torch.ones_like(position, dtype=torch.bool)
    kept = order[keep]
    return sorted_experts[keep], position[keep], kept // k, kept % k


def _capacity(tokens: int, k: int, experts: int) -> int:
    return max(int(tokens * k / experts * WORKLOAD["capacity_factor"]), 1)


def _forward(hidden, selected, weights, gate, up, down, *, use_capacity: bool = True):
    dt = compute_dtype(hidden, weights, gate, up, down)
    tokens, h = hidden.shape
    experts = gate.shape[0]
    cap = _capacity(tokens, selected.shape[1], experts)
    exp_idx, pos, tok, slot = _admitted(selected, experts, cap if use_capacity else None)
    rows = cap if use_capacity else int(pos.max()) + 1
    batch = torch.zeros(experts, rows, h, dtype=dt, device=hidden.device)
    batch[exp_idx, pos] = hidden[tok].to(dt)
    act = torch.nn.functional.silu(torch.bmm(batch, gate.to(dt))) * torch.bmm(batch, up.to(dt))
    expert_out = torch.bmm(act, down.to(dt))
    contrib = expert_out[exp_idx, pos] * weights.to(dt)[tok, slot, None]
    out = torch.zeros(tokens, h, dtype=dt, device=hidden.device)
    out.index_add_(0, tok, contrib)
    return out.to(hidden.dtype)


def reference(
    hidden_states: torch.Tensor,
    selected_experts: torch.Tensor,
    routing_weights: torch.Tensor,
    expert_gate_weights: torch.Tensor,
    expert_up_weights: torch.Tensor,
    expert_down_weights: torch.Tensor,
) -> torch.Tensor:
    return _forward(
        hidden_states, selected_experts, routing_weights,
        expert_gate_weights, expert_up_weights, expert_down_weights,
    )


def dropped_term(*inputs: torch.Tensor) -> torch.Tensor:
    """Mutant: ignores the capacity limit (admits every assignment)."""
    return _forward(*inputs, use_capacity=False)


def reordered(
    hidden_states: torch.Tensor,
    selected_experts: torch.Tensor,
    routing_weights: torch.Tensor,
    expert_gate_weights: torch.Tensor,
    expert_up_weights: torch.Tensor,
    expert_down_weights: torch.Tensor,
) -> torch.Tensor:
    """Valid alternative: one expert at a time, fused gate/up weights, output rows gathered."""
    dt = compute_dtype(hidden_states, routing_weights, expert_gate_weights)
    tokens, h = hidden_states.shape
    experts, _, inter = expert_gate_weights.shape
    cap = _capacity(tokens, selected_experts.shape[1], experts)
    exp_idx, _, tok, slot = _admitted(selected_experts, experts, cap)
    out = torch.zeros(tokens, h, dtype=dt, device=hidden_states.device)
    for e in range(experts):
        mine = exp_idx == e
        t, s = tok[mine], slot[mine]
        if t.numel() == 0:
            continue
        fused = torch.cat([expert_gate_weights[e], expert_up_weights[e]], dim=1).to(dt)
        gu = hidden_states[t].to(dt) @ fused
        act = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
        y = (act @ expert_down_weights[e].to(dt)) * routing_weights[t, s, None].to(dt)
        out.index_add_(0, t, y)
    return out.to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    t, h, i, e, k = w.tokens, w.hidden, w.intermediate, w.experts, w.top_k
    admitted = min(t * k, e * _capacity(t, k, e))
    flops = 2.0 * admitted * 3 * h * i
    read = t * h * 2 + t * k * (8 + 2) + 3 * e * h * i * 2
    elementwise = admitted * (4.0 * i + 2.0 * h)
    return Cost(flops={"bf16": flops, "fp32": elementwise}, bytes=float(read + t * h * 2))
