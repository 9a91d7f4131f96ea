"""Backward pass of the Step1X-Edit feed-forward MLP in float32. Forward (saved by the caller):
h = x·W1ᵀ + b1 (2,048 → 8,192 channels), a = GELU_tanh(h), y = a·W2ᵀ + b2 (8,192 → 2,048).
Given dy [batch, seq, 2048], the saved x, h and a, and the weights W1 [8192, 2048] and
W2 [2048, 8192], compute grad_x [batch, seq, 2048], grad_W1 [8192, 2048], grad_b1 [8192],
grad_W2 [2048, 8192] and grad_b2 [2048], all float32. The GELU derivative is that of the tanh
approximation: 0.5·(1 + t) + 0.5·h·(1 − t²)·√(2/π)·(1 + 3·0.044715·h²), t = tanh(√(2/π)·(h +
0.044715·h³)). Four GEMMs dominate; bias gradients reduce over all tokens."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p37"
SLUG = "gelu_mlp_backward_step1x_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = "nvidia/SOL-ExecBench: L2/073_feedforward_mlp_backward (task #167), workload record 4"
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "The saved activations come from a real forward pass on the drawn x, W1 and b1. The upstream "
    "inputs bias1 and bias2 are dropped because the backward never reads them."
)
WORKLOAD = {"batch": 16, "seq": 1024, "hidden": 2048, "intermediate": 8192}
SMOKE = {"batch": 2, "seq": 24, "hidden": 64, "intermediate": 256}
INPUTS = ("grad_output", "hidden_states", "weight1", "weight2", "intermediate",
          "intermediate_activated")
OUTPUTS = ("grad_hidden_states", "grad_weight1", "grad_bias1", "grad_weight2", "grad_bias2")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None
_K = math.sqrt(2.0 / math.pi)
_C = 0.044715


def _gelu_tanh(h: torch.Tensor) -> torch.Tensor:
    return 0.5 * h * (1.0 + torch.tanh(_K * (h + _C * h.pow(3))))


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    x = randn(g, (w.batch, w.seq, w.hidden), f32, device)
    w1 = randn(g, (w.intermediate, w.hidden), f32, device, std=1.0 / math.sqrt(w.hidden))
    b1 = randn(g, (w.intermediate,), f32, device, std=0.1)
    w2 = randn(g, (w.hidden, w.intermediate), f32, device, std=1.0 / math.sqrt(w.intermediate))
    dy = randn(g, (w.batch, w.seq, w.hidden), f32, device)
    h = x @ w1.t() + b1
    return [dy, x, w1, w2, h, _gelu_tanh(h)]


def _backward(grad_output, hidden_states, weight1, weight2, intermediate,
              intermediate_activated, derivative_cubic: bool = True):
    dt = compute_dtype(grad_output, hidden_states, weight1, weight2, intermediate)
    hidden, inter = grad_output.shape[-1], intermediate.shape[-1]
    dy = grad_output.to(dt).reshape(-1, hidden)
    x = hidden_states.to(dt).reshape(-1, hidden)
    h = intermediate.to(dt).reshape(-1, inter)
    a = intermediate_activated.to(dt).reshape(-1, inter)
    da = dy @ weight2.to(dt)
    grad_w2 = dy.t() @ a
    grad_b2 = dy.sum(dim=0)
    t = torch.tanh(_K * (h + _C * h.pow(3)))
    slope = _K * (1.0 + 3.0 * _C * h * h) if derivative_cubic else _K
    dh = da * (0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * slope)
    grad_x = dh @ weight1.to(dt)
    grad_w1 = dh.t() @ x
    grad_b1 = dh.sum(dim=0)
    out = (grad_x.reshape(grad_output.shape), grad_w1, grad_b1, grad_w2, grad_b2)
    return tuple(o.to(grad_output.dtype) for o in out)


def reference(grad_output, hidden_states, weight1, weight2, intermediate,
              intermediate_activated):
    return _backward(grad_output, hidden_states, weight1, weight2, intermediate,
                     intermediate_activated)


def dropped_term(grad_output, hidden_states, weight1, weight2, intermediate,
                 intermediate_activated):
    """Mutant: the GELU derivative forgets the cubic term's 3·0.044715·h² in d(inner)/dh."""
    return _backward(grad_output, hidden_states, weight1, weight2, intermediate,
                     intermediate_activated, derivative_cubic=False)


def reordered(grad_output, hidden_states, weight1, weight2, intermediate,
              intermediate_activated):
    """Valid alternative: autograd through GELU_tanh; weight gradients as transposed products;
    bias gradients summed per sequence first."""
    dt = compute_dtype(grad_output, hidden_states, weight1, weight2, intermediate)
    hidden, inter = grad_output.shape[-1], intermediate.shape[-1]
    dy3 = grad_output.to(dt)
    dy = dy3.reshape(-1, hidden)
    x = hidden_states.to(dt).reshape(-1, hidden)
    a = intermediate_activated.to(dt).reshape(-1, inter)
    da = dy @ weight2.to(dt)
    with torch.enable_grad():
        h = intermediate.to(dt).reshape(-1, inter).detach().requires_grad_(True)
        (dh,) = torch.autograd.grad(_gelu_tanh(h), h, grad_outputs=da)
    out = (
        (dh @ weight1.to(dt)).reshape(grad_output.shape),
        (x.t() @ dh).t(),
        dh.reshape(dy3.shape[0], -1, inter).sum(dim=1).sum(dim=0),
        (a.t() @ dy).t(),
        dy3.sum(dim=1).sum(dim=0),
    )
    return tuple(o.to(grad_output.dtype) for o in out)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 4 * 2.0 * tokens * w.hidden * w.intermediate
    elementwise = 18.0 * tokens * w.intermediate
    inputs = 2 * tokens * w.hidden + 2 * tokens * w.intermediate + 2 * w.hidden * w.intermediate
    outputs = tokens * w.hidden + 2 * w.hidden * w.intermediate + w.hidden + w.intermediate
    return Cost(flops={"fp32": matmul + elementwise}, bytes=4.0 * (inputs + outputs))
