"""Backward pass of the Kokoro-82M feed-forward block in float32. Forward (saved by the caller):
h1 = x·W1ᵀ, a = GELU_tanh(h1), r = a·W2ᵀ + x, n = LayerNorm(r) (mean/biased variance over 512
channels, eps 1e-5), y = n·γ + β. Given dy and the saved x [batch, seq, 512], h1 and a
[batch, seq, 2048], n and var [batch, seq, 1], and the weights W1 [2048, 512], W2 [512, 2048],
γ [512], compute the gradients for x, W1, b1, W2, b2, γ and β (seven float32 outputs). The
LayerNorm backward is dr = (g − mean(g) − n·mean(g·n))/sqrt(var + eps) with g = dy·γ; the
GELU-tanh derivative is applied to dh1; dx collects both the residual and the W1 path."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p35"
SLUG = "residual_layernorm_gelu_ffn_backward_kokoro_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L2/042_ffn_gelu_projection_fused_backward (task #136), "
    "workload record 15"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Saved tensors come from a real forward pass on the drawn x and weights (as upstream). The "
    "upstream input residual_output is dropped because the backward never reads it; eps is a "
    "constant (1e-5). γ is drawn as 1 + 0.1·N(0, 1) instead of ones."
)
WORKLOAD = {"batch": 32, "seq": 4096, "hidden": 512, "intermediate": 2048, "eps": 1e-5}
SMOKE = {"batch": 2, "seq": 24, "hidden": 64, "intermediate": 256, "eps": 1e-5}
INPUTS = (
    "grad_output",
    "hidden_states",
    "fc1_weight",
    "fc1_output",
    "gelu_output",
    "fc2_weight",
    "normalized",
    "var",
    "ln_weight",
)
OUTPUTS = (
    "grad_hidden_states",
    "grad_fc1_weight",
    "grad_fc1_bias",
    "grad_fc2_weight",
    "grad_fc2_bias",
    "grad_ln_weight",
    "grad_ln_bias",
)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None
_K = math.sqrt(2.0 / math.pi)
_C = 0.044715


def _gelu_tanh(h: torch.Tensor) -> torch.Tensor:
    return 0.5 * h * (1.0 + torch.tanh(_K * (h + _C * h.pow(3))))


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    x = randn(g, (w.batch, w.seq, w.hidden), f32, device, std=0.1)
    w1 = randn(g, (w.intermediate, w.hidden), f32, device, std=math.sqrt(2.0 / w.hidden))
    w2 = randn(g, (w.hidden, w.intermediate), f32, device, std=math.sqrt(2.0 / w.intermediate))
    gamma = randn(g, (w.hidden,), f32, device, std=0.1, mean=1.0)
    dy = randn(g, (w.batch, w.seq, w.hidden), f32, device)
    h1 = x @ w1.t()
    a = _gelu_tanh(h1)
    r = a @ w2.t() + x
    mean = r.mean(dim=-1, keepdim=True)
    var = (r - mean).pow(2).mean(dim=-1, keepdim=True)
    n = (r - mean) / torch.sqrt(var + w.eps)
    return [dy, x, w1, h1, a, w2, n, var, gamma]


def _backward(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight,
              normalized, var, ln_weight, residual_path: bool = True):
    dt = compute_dtype(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output)
    dy, x, h1, a = (t.to(dt) for t in (grad_output, hidden_states, fc1_output, gelu_output))
    n, v = normalized.to(dt), var.to(dt)
    hidden, inter = dy.shape[-1], h1.shape[-1]
    grad_ln_weight = (dy * n).sum(dim=(0, 1))
    grad_ln_bias = dy.sum(dim=(0, 1))
    gn = dy * ln_weight.to(dt)
    dr = (gn - gn.mean(-1, keepdim=True) - n * (gn * n).mean(-1, keepdim=True)) / torch.sqrt(
        v + WORKLOAD["eps"]
    )
    dr2 = dr.reshape(-1, hidden)
    grad_fc2_bias = dr2.sum(dim=0)
    grad_fc2_weight = dr2.t() @ a.reshape(-1, inter)
    da = dr @ fc2_weight.to(dt)
    t = torch.tanh(_K * (h1 + _C * h1.pow(3)))
    dgelu = 0.5 * (1.0 + t) + 0.5 * h1 * (1.0 - t * t) * _K * (1.0 + 3.0 * _C * h1 * h1)
    dh1 = da * dgelu
    dh1_2 = dh1.reshape(-1, inter)
    grad_fc1_bias = dh1_2.sum(dim=0)
    grad_fc1_weight = dh1_2.t() @ x.reshape(-1, hidden)
    dx = dh1 @ fc1_weight.to(dt)
    if residual_path:
        dx = dx + dr
    out = (dx, grad_fc1_weight, grad_fc1_bias, grad_fc2_weight, grad_fc2_bias, grad_ln_weight,
           grad_ln_bias)
    return tuple(o.to(grad_output.dtype) for o in out)


def reference(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight,
              normalized, var, ln_weight):
    return _backward(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output,
                     fc2_weight, normalized, var, ln_weight)


def dropped_term(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight,
                 normalized, var, ln_weight):
    """Mutant: grad_hidden_states forgets the residual path."""
    return _backward(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output,
                     fc2_weight, normalized, var, ln_weight, residual_path=False)


def reordered(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight,
              normalized, var, ln_weight):
    """Valid alternative: autograd through the GELU, sums-then-divide in the LayerNorm backward,
    weight gradients as transposed products."""
    dt = compute_dtype(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output)
    dy, x, h1, a = (t.to(dt) for t in (grad_output, hidden_states, fc1_output, gelu_output))
    n, v = normalized.to(dt), var.to(dt)
    hidden, inter = dy.shape[-1], h1.shape[-1]
    gn = dy * ln_weight.to(dt)
    rstd = torch.rsqrt(v + WORKLOAD["eps"])
    dr = rstd * (gn - (gn.sum(-1, keepdim=True) + n * (gn * n).sum(-1, keepdim=True)) / hidden)
    dr2 = dr.reshape(-1, hidden)
    da = dr2 @ fc2_weight.to(dt)
    with torch.enable_grad():
        h = h1.reshape(-1, inter).detach().requires_grad_(True)
        (dh1,) = torch.autograd.grad(_gelu_tanh(h), h, grad_outputs=da)
    x2 = x.reshape(-1, hidden)
    dx = dr2 + dh1 @ fc1_weight.to(dt)
    out = (
        dx.reshape(dy.shape),
        (x2.t() @ dh1).t(),
        dh1.sum(dim=0),
        (a.reshape(-1, inter).t() @ dr2).t(),
        dr2.sum(dim=0),
        (dy * n).reshape(-1, hidden).sum(dim=0),
        dy.reshape(-1, hidden).sum(dim=0),
    )
    return tuple(o.to(grad_output.dtype) for o in out)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 4 * 2.0 * tokens * w.hidden * w.intermediate
    elementwise = 20.0 * tokens * w.intermediate + 15.0 * tokens * w.hidden
    inputs = 3 * tokens * w.hidden + 2 * tokens * w.intermediate + tokens
    params = 2 * w.hidden * w.intermediate + w.hidden
    outputs = tokens * w.hidden + 2 * w.hidden * w.intermediate + w.intermediate + 3 * w.hidden
    return Cost(flops={"fp32": matmul + elementwise}, bytes=4.0 * (inputs + params + outputs))
