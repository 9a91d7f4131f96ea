"""Backward pass of the Qwen3-Coder-30B MoE router (128 experts, top-8, hidden 2048). The
forward pass was logits = hidden_states · gate_weightᵀ, routing_probs = softmax(logits)
(float32 [T, 128]), the top-8 experts selected_experts (int64 [T, 8]) and their weights
normalised by routing_weights_sum (float32 [T, 1], the sum of the 8 selected probabilities).
Given upstream gradients for the normalised weights (grad_routing_weights, bfloat16 [T, 8]), for
the expert mask (grad_expert_mask, bfloat16 [128, 8, T], indexed [expert, slot, token]) and for
the probabilities directly (grad_router_logits, bfloat16 [T, 128]), compute the probability
gradient: the quotient-rule gradient of the normalisation scattered to the selected experts
(g/s − Σ(g·p_sel/s)/s), plus grad_expert_mask[e, slot, token] at each selected (token, slot, e),
plus grad_router_logits; back-propagate through the softmax (p ⊙ (g − Σ g·p)); round that logit
gradient to bfloat16; and return grad_hidden_states = dlogits · gate_weight (bfloat16
[T, 2048]) and grad_gate_weight = dlogitsᵀ · hidden_states (bfloat16 [128, 2048]). The input
router_logits is carried for completeness and is not needed."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p46"
SLUG = "router_dispatch_backward_qwen3_coder_30b_bf16"
FAMILY = "MoE"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L2/011_moe_sparse_routing_and_dispatch_backward "
    "(Qwen/Qwen3-Coder-30B-A3B-Instruct), workload record 2"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Token count exact; values re-drawn per seed with the upstream scales (gate weight 0.02, "
    "gradients 0.1 / 0.01 / 0.1). routing_probs, selected_experts and routing_weights_sum are "
    "derived from the drawn router_logits as in the forward pass, so the inputs are consistent."
)
WORKLOAD = {"tokens": 65536, "hidden": 2048, "experts": 128, "top_k": 8}
SMOKE = {"tokens": 256, "hidden": 128, "experts": 128, "top_k": 8}
INPUTS = (
    "hidden_states",
    "gate_weight",
    "router_logits",
    "routing_probs",
    "selected_experts",
    "routing_weights_sum",
    "grad_routing_weights",
    "grad_expert_mask",
    "grad_router_logits",
)
OUTPUTS = ("grad_hidden_states", "grad_gate_weight")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    t, h, e, k = w.tokens, w.hidden, w.experts, w.top_k
    hidden = randn(g, (t, h), torch.bfloat16, device)
    gate_weight = randn(g, (e, h), torch.bfloat16, device, std=0.02)
    logits = randn(g, (t, e), torch.bfloat16, device)
    probs = torch.softmax(logits.float(), dim=1)
    top = probs.topk(k, dim=-1)
    weights_sum = top.values.sum(dim=-1, keepdim=True)
    grad_weights = randn(g, (t, k), torch.bfloat16, device, std=0.1)
    grad_mask = randn(g, (e, k, t), torch.bfloat16, device, std=0.01)
    grad_logits = randn(g, (t, e), torch.bfloat16, device, std=0.1)
    return [
        hidden, gate_weight, logits, probs, top.indices, weights_sum,
        grad_weights, grad_mask, grad_logits,
    ]


def _logit_grad(inputs: tuple, direct: bool = True) -> tuple[torch.Tensor, torch.dtype]:
    """The router-logit gradient, rounded to the hidden-state dtype, and the compute dtype."""
    (hidden, gate_weight, _, probs, sel, wsum, g_weights, g_mask, g_logits) = inputs
    dt = compute_dtype(hidden, gate_weight, probs, wsum, g_weights, g_mask, g_logits)
    p, s, gw = probs.to(dt), wsum.to(dt), g_weights.to(dt)
    grad_sum = (gw * p.gather(1, sel) / s).sum(-1, keepdim=True)
    grad_probs = torch.zeros_like(p).scatter_(1, sel, gw / s - grad_sum / s)
    from_mask = g_mask.permute(2, 1, 0).to(dt).gather(2, sel.unsqueeze(2)).squeeze(2)
    grad_probs.scatter_add_(1, sel, from_mask)
    if direct:
        grad_probs = grad_probs + g_logits.to(dt)
    dot = (grad_probs * p).sum(1, keepdim=True)
    return (p * (grad_probs - dot)).to(hidden.dtype).to(dt), dt


def _backward(inputs: tuple, direct: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    hidden, gate_weight = inputs[0], inputs[1]
    dlogits, dt = _logit_grad(inputs, direct)
    grad_hidden = dlogits @ gate_weight.to(dt)
    grad_gate = dlogits.t() @ hidden.to(dt)
    return grad_hidden.to(hidden.dtype), grad_gate.to(hidden.dtype)


def reference(
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    router_logits: torch.Tensor,
    routing_probs: torch.Tensor,
    selected_experts: torch.Tensor,
    routing_weights_sum: torch.Tensor,
    grad_routing_weights: torch.Tensor,
    grad_expert_mask: torch.Tensor,
    grad_router_logits: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward((
        hidden_states, gate_weight, router_logits, routing_probs, selected_experts,
        routing_weights_sum, grad_routing_weights, grad_expert_mask, grad_router_logits,
    ))


def dropped_term(*inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mutant: forgets the direct grad_router_logits path."""
    return _backward(tuple(inputs), direct=False)


def reordered(*inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid alternative: the weight gradient summed over two token halves, transposed GEMM."""
    hidden, gate_weight = inputs[0], inputs[1]
    dlogits, dt = _logit_grad(tuple(inputs))
    half = hidden.shape[0] // 2
    x = hidden.to(dt)
    grad_gate = dlogits[:half].t() @ x[:half] + dlogits[half:].t() @ x[half:]
    grad_hidden = (gate_weight.to(dt).t() @ dlogits.t()).t()
    return grad_hidden.to(hidden.dtype), grad_gate.to(hidden.dtype)


def cost(w: Workload) -> Cost:
    t, h, e, k = w.tokens, w.hidden, w.experts, w.top_k
    gemm = 2.0 * 2 * t * e * h
    read = t * h * 2 + e * h * 2 + t * e * (2 + 4 + 2) + t * k * (8 + 2) + t * 4 + e * k * t * 2
    write = t * h * 2 + e * h * 2
    return Cost(flops={"bf16": gemm, "fp32": 10.0 * t * e}, bytes=float(read + write))
