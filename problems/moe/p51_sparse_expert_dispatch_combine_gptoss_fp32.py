"""Sparse expert dispatch and weighted combine for gpt-oss-120b (128 experts, 4 per token,
hidden and intermediate 2880, float32 throughout). Each token x (hidden_states [T, 2880]) is
sent to the experts listed in router_indices (int64 [T, 4], distinct per token). An expert
computes gu = x · gate_up_proj[e] + gate_up_proj_bias[e] (weights [128, 2880, 5760] in
[in, out] layout, bias [128, 5760]) whose even columns are the gate and odd columns the up
projection; gate is clamped to ≤ 7 and up to [−7, 7]; the activation is
(up + 1) · gate · sigmoid(1.702 · gate); the expert output is that activation ·
down_proj[e] + down_proj_bias[e] (down_proj [128, 2880, 2880], bias [128, 2880]). The output
[T, 2880] (float32) is the sum over a token's experts of routing_weights[token, e] (float32
[T, 128], a softmax over all experts) times the expert output."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p51"
SLUG = "sparse_expert_dispatch_combine_gptoss_fp32"
FAMILY = "MoE"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L2/065_sparse_expert_dispatch_and_combine (openai/gpt-oss-120b), "
    "workload record 11"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Token count exact. Routing is the top-4 of per-seed drawn logits (distinct experts; "
    "upstream draws indices independently, allowing repeats), with routing_weights the "
    "softmax of the same logits. Biases are non-zero (upstream draws zeros) and gate/up "
    "weights are scaled so pre-activations have std ~2.7 and the ±7 clamps engage."
)
WORKLOAD = {"tokens": 16384, "hidden": 2880, "intermediate": 2880, "experts": 128, "top_k": 4}
SMOKE = {"tokens": 64, "hidden": 64, "intermediate": 64, "experts": 16, "top_k": 4}
INPUTS = (
    "hidden_states",
    "router_indices",
    "routing_weights",
    "gate_up_proj",
    "gate_up_proj_bias",
    "down_proj",
    "down_proj_bias",
)
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

GLU_ALPHA = 1.702
GLU_LIMIT = 7.0
_PRE_ACT_STD = 2.7


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    t, h, i, e, k = w.tokens, w.hidden, w.intermediate, w.experts, w.top_k
    hidden = randn(g, (t, h), torch.float32, device)
    logits = randn(g, (t, e), torch.float32, device)
    indices = logits.topk(k, dim=-1).indices
    weights = torch.softmax(logits, dim=-1)
    gate_up = randn(g, (e, h, 2 * i), torch.float32, device, std=_PRE_ACT_STD * h**-0.5)
    gate_up_bias = randn(g, (e, 2 * i), torch.float32, device, std=0.5)
    down = randn(g, (e, i, h), torch.float32, device, std=0.1 * i**-0.5)
    down_bias = randn(g, (e, h), torch.float32, device, std=0.1)
    return [hidden, indices, weights, gate_up, gate_up_bias, down, down_bias]


def _combine(inputs: tuple, plus_one: bool = True, split: bool = False) -> torch.Tensor:
    (hidden, indices, weights, gate_up, gate_up_bias, down, down_bias) = inputs
    dt = compute_dtype(hidden, weights, gate_up, gate_up_bias, down, down_bias)
    out = torch.zeros(hidden.shape, dtype=dt, device=hidden.device)
    for e in range(gate_up.shape[0]):
        tok = torch.nonzero((indices == e).any(dim=-1), as_tuple=True)[0]
        if tok.numel() == 0:
            continue
        x = hidden[tok].to(dt)
        w_gu, b_gu = gate_up[e].to(dt), gate_up_bias[e].to(dt)
        if split:
            gate = x @ w_gu[:, 0::2] + b_gu[0::2]
            up = x @ w_gu[:, 1::2] + b_gu[1::2]
        else:
            gu = x @ w_gu + b_gu
            gate, up = gu[:, 0::2], gu[:, 1::2]
        gate = gate.clamp(max=GLU_LIMIT)
        up = up.clamp(min=-GLU_LIMIT, max=GLU_LIMIT)
        act = gate * torch.sigmoid(gate * GLU_ALPHA) * (up + 1.0 if plus_one else up)
        y = act @ down[e].to(dt) + down_bias[e].to(dt)
        out.index_add_(0, tok, y * weights[tok, e, None].to(dt))
    return out.to(hidden.dtype)


def reference(
    hidden_states: torch.Tensor,
    router_indices: torch.Tensor,
    routing_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    gate_up_proj_bias: torch.Tensor,
    down_proj: torch.Tensor,
    down_proj_bias: torch.Tensor,
) -> torch.Tensor:
    return _combine((
        hidden_states, router_indices, routing_weights, gate_up_proj, gate_up_proj_bias,
        down_proj, down_proj_bias,
    ))


def dropped_term(*inputs: torch.Tensor) -> torch.Tensor:
    """Mutant: forgets the +1 on the up projection."""
    return _combine(tuple(inputs), plus_one=False)


def reordered(*inputs: torch.Tensor) -> torch.Tensor:
    """Valid alternative: gate and up columns de-interleaved into two separate GEMMs."""
    return _combine(tuple(inputs), split=True)


def cost(w: Workload) -> Cost:
    t, h, i, e, k = w.tokens, w.hidden, w.intermediate, w.experts, w.top_k
    routed = t * k
    flops = 2.0 * routed * (h * 2 * i + i * h)
    read = t * h * 4 + t * k * 8 + t * e * 4 + e * (3 * h * i + 2 * i + h) * 4
    return Cost(flops={"fp32": flops + routed * 10.0 * i}, bytes=float(read + t * h * 4))
