"""Backward pass of the Hermes-4-405B SwiGLU MLP y = down(SiLU(gate(x))·up(x)) in bfloat16
(hidden 16,384, intermediate 53,248, bias-free projections in nn.Linear layout). Given the
upstream gradient dy [batch, seq, 16384], the saved input x, the saved pre-activations
gate(x) and up(x) and the saved SiLU(gate(x)) (all bf16), and the three weights, compute
grad_x [batch, seq, 16384] and the weight gradients of gate [53248, 16384], up [53248, 16384]
and down [16384, 53248], all bfloat16. SiLU'(g) = σ(g)·(1 + g·(1 − σ(g))). Six large GEMMs
(bf16 tensor-core products with float32 accumulation) dominate; the weight gradients reduce
over all tokens."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p34"
SLUG = "swiglu_mlp_backward_hermes_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = "nvidia/SOL-ExecBench: L2/005_swiglu_mlp_backward (task #99), workload record 12"
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Rounding points follow upstream: every GEMM takes input-dtype operands, and the SwiGLU "
    "product and the gradients of the gate and up pre-activations are rounded to the input dtype "
    "before their GEMMs (no-ops on the float64 anchor). activated_gate is SiLU(gate_output) "
    "rounded to bf16, as a saved forward would be. Memory: the float64 anchor's three weights "
    "and three weight gradients take 42 GB; one draw (inputs, reference, anchor) peaked at "
    "84 GB on an H200, the anchor took 1.4 s and the eager reference 140 ms."
)
WORKLOAD = {"batch": 64, "seq": 128, "hidden": 16384, "intermediate": 53248}
SMOKE = {"batch": 2, "seq": 8, "hidden": 64, "intermediate": 208}
INPUTS = (
    "grad_output",
    "x",
    "gate_output",
    "up_output",
    "activated_gate",
    "gate_weight",
    "up_weight",
    "down_weight",
)
OUTPUTS = ("grad_x", "grad_gate_weight", "grad_up_weight", "grad_down_weight")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    bf = torch.bfloat16
    act_shape = (w.batch, w.seq, w.intermediate)
    dy = randn(g, (w.batch, w.seq, w.hidden), bf, device)
    x = randn(g, (w.batch, w.seq, w.hidden), bf, device)
    gate = randn(g, act_shape, bf, device)
    up = randn(g, act_shape, bf, device)
    act = torch.nn.functional.silu(gate.float()).to(bf)
    s_in, s_mid = 1.0 / math.sqrt(w.hidden), 1.0 / math.sqrt(w.intermediate)
    wg = randn(g, (w.intermediate, w.hidden), bf, device, std=s_in)
    wu = randn(g, (w.intermediate, w.hidden), bf, device, std=s_in)
    wd = randn(g, (w.hidden, w.intermediate), bf, device, std=s_mid)
    return [dy, x, gate, up, act, wg, wu, wd]


def _backward(grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight,
              down_weight, up_path: bool = True):
    dt = compute_dtype(grad_output, x, gate_output, up_output, activated_gate)
    io = grad_output.dtype
    hidden, inter = grad_output.shape[-1], gate_output.shape[-1]
    dy2 = grad_output.reshape(-1, hidden)
    x2 = x.reshape(-1, hidden)
    gate = gate_output.reshape(-1, inter).to(dt)
    up = up_output.reshape(-1, inter).to(dt)
    act = activated_gate.reshape(-1, inter).to(dt)
    grad_h = (dy2 @ down_weight).to(dt)
    gated = (act * up).to(io)
    grad_down_weight = dy2.t() @ gated
    sig = torch.sigmoid(gate)
    silu_grad = sig * (1.0 + gate * (1.0 - sig))
    grad_gate = (grad_h * up * silu_grad).to(io)
    grad_up = (grad_h * act).to(io)
    grad_x = (grad_gate @ gate_weight).to(dt)
    if up_path:
        grad_x = grad_x + (grad_up @ up_weight).to(dt)
    grad_gate_weight = grad_gate.t() @ x2
    grad_up_weight = grad_up.t() @ x2
    return (
        grad_x.to(io).reshape(grad_output.shape),
        grad_gate_weight.to(io),
        grad_up_weight.to(io),
        grad_down_weight.to(io),
    )


def reference(grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight,
              down_weight):
    return _backward(grad_output, x, gate_output, up_output, activated_gate, gate_weight,
                     up_weight, down_weight)


def dropped_term(grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight,
                 down_weight):
    """Mutant: grad_x forgets the contribution through the up projection."""
    return _backward(grad_output, x, gate_output, up_output, activated_gate, gate_weight,
                     up_weight, down_weight, up_path=False)


def reordered(grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight,
              down_weight):
    """Valid alternative: SiLU' written as σ + silu·(1 − σ); grad_x as one GEMM with K = 2·I."""
    dt = compute_dtype(grad_output, x, gate_output, up_output, activated_gate)
    io = grad_output.dtype
    hidden, inter = grad_output.shape[-1], gate_output.shape[-1]
    dy2 = grad_output.reshape(-1, hidden)
    x2 = x.reshape(-1, hidden)
    gate = gate_output.reshape(-1, inter).to(dt)
    up = up_output.reshape(-1, inter).to(dt)
    act = activated_gate.reshape(-1, inter).to(dt)
    grad_h = (dy2 @ down_weight).to(dt)
    grad_down_weight = (dy2.t() @ (act * up).to(io)).to(io)
    sig = torch.sigmoid(gate)
    grad_gate = (grad_h * up * (sig + gate * sig * (1.0 - sig))).to(io)
    grad_up = (grad_h * act).to(io)
    both = torch.cat([grad_gate, grad_up], dim=1)
    grad_x = both @ torch.cat([gate_weight, up_weight], dim=0)
    return (
        grad_x.to(io).reshape(grad_output.shape),
        (x2.t() @ grad_gate).t().to(io),
        (x2.t() @ grad_up).t().to(io),
        grad_down_weight,
    )


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 6 * 2.0 * tokens * w.hidden * w.intermediate
    elementwise = 10.0 * tokens * w.intermediate
    acts = 3 * tokens * w.hidden + 3 * tokens * w.intermediate
    weights = 2 * 3 * w.hidden * w.intermediate
    return Cost(flops={"bf16": matmul, "fp32": elementwise}, bytes=2.0 * (acts + weights))
