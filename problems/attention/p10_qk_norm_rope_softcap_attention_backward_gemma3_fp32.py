"""Backward pass of the Gemma-3-4B attention core (float32): given the upstream gradient
grad_output [B, S, 3072] of the block output, return the gradients of the hidden states and of
every parameter. Forward (recomputed): q = x·W_qᵀ (24 heads × 128), k = x·W_kᵀ and v = x·W_vᵀ
(8 heads × 128, grouped-query: q head h uses kv head h // 3); q and k are RMS-normalised per
head (epsilon rms_norm_eps) and scaled by (1 + q_norm_weight) / (1 + k_norm_weight); rotary
embedding x·cos + rotate_half(x)·sin with cos/sin [B, S, 128] (rotate_half(x) = [−x₂, x₁]);
logits = scaling · q·k, soft-capped as c·tanh(logits / c) (c = attn_logit_softcapping),
causal mask, softmax, attention output o = P·v, block output = o·W_oᵀ (no biases). Outputs, in
order: grad_hidden_states [B, S, 3072], grad_q_weight [3072, 3072], grad_k_weight
[1024, 3072], grad_v_weight [1024, 3072], grad_o_weight [3072, 3072], grad_q_norm_weight [128],
grad_k_norm_weight [128], all float32."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p10"
SLUG = "qk_norm_rope_softcap_attention_backward_gemma3_fp32"
FAMILY = "Attention"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L2/037_qk_norm_rope_attention_core_backward (google/gemma-3-4b-it), "
    "workload record 5"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Axes and captured scalars of record 5 (B 64, S 256; scaling 128^−½, soft cap 50, eps "
    "1e-6). Hidden states are unit-variance (upstream scales them by 1/sqrt(3072), which makes "
    "the RMSNorm epsilon comparable to the squared activations); projections are scaled by "
    "1/sqrt(fan_in), norm weights drawn as 0.1·N(0,1); rotary tables are built from real "
    "positions (base 10000)."
)
WORKLOAD = {"batch": 64, "seq_len": 256, "hidden": 3072, "q_heads": 24, "kv_heads": 8,
            "head_dim": 128, "rope_theta": 10000.0, "scaling": 0.08838834764831845,
            "softcap": 50.0, "eps": 1e-6}
SMOKE = {"batch": 2, "seq_len": 16, "hidden": 48, "q_heads": 6, "kv_heads": 2, "head_dim": 16,
         "rope_theta": 10000.0, "scaling": 0.25, "softcap": 50.0, "eps": 1e-6}
INPUTS = ("grad_output", "hidden_states", "cos", "sin", "q_weight", "k_weight", "v_weight",
          "o_weight", "q_norm_weight", "k_norm_weight", "scaling", "attn_logit_softcapping",
          "rms_norm_eps")
OUTPUTS = ("grad_hidden_states", "grad_q_weight", "grad_k_weight", "grad_v_weight",
           "grad_o_weight", "grad_q_norm_weight", "grad_k_norm_weight")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    f32 = torch.float32
    b, s, h, d = w.batch, w.seq_len, w.hidden, w.head_dim
    grad_output = randn(g, (b, s, h), f32, device)
    x = randn(g, (b, s, h), f32, device)
    half = d // 2
    inv_freq = w.rope_theta ** (-torch.arange(half, device=device, dtype=f32) / half)
    freqs = torch.arange(s, device=device, dtype=f32)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().expand(b, s, d).contiguous()
    sin = emb.sin().expand(b, s, d).contiguous()
    std_in, std_o = 1.0 / math.sqrt(h), 1.0 / math.sqrt(w.q_heads * d)
    q_w = randn(g, (w.q_heads * d, h), f32, device, std=std_in)
    k_w = randn(g, (w.kv_heads * d, h), f32, device, std=std_in)
    v_w = randn(g, (w.kv_heads * d, h), f32, device, std=std_in)
    o_w = randn(g, (h, w.q_heads * d), f32, device, std=std_o)
    q_norm = randn(g, (d,), f32, device, std=0.1)
    k_norm = randn(g, (d,), f32, device, std=0.1)
    return [grad_output, x, cos, sin, q_w, k_w, v_w, o_w, q_norm, k_norm, w.scaling, w.softcap,
            w.eps]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotate_half_t(y: torch.Tensor) -> torch.Tensor:
    """Transpose of rotate_half (its adjoint): [y₂, −y₁]."""
    y1, y2 = y.chunk(2, dim=-1)
    return torch.cat((y2, -y1), dim=-1)


def _heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    b, s, _ = t.shape
    return t.view(b, s, -1, head_dim).transpose(1, 2)


def _merge(t: torch.Tensor) -> torch.Tensor:
    b, n, s, d = t.shape
    return t.transpose(1, 2).reshape(b, s, n * d)


def _backward(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight,
              q_norm_weight, k_norm_weight, scaling, softcap, eps, norm_projection=True):
    dt = compute_dtype(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight,
                       o_weight, q_norm_weight, k_norm_weight)
    head_dim = cos.shape[-1]
    x = hidden_states.to(dt)
    wq, wk, wv, wo = (t.to(dt) for t in (q_weight, k_weight, v_weight, o_weight))
    gq, gk = 1.0 + q_norm_weight.to(dt), 1.0 + k_norm_weight.to(dt)
    c, s = cos.to(dt).unsqueeze(1), sin.to(dt).unsqueeze(1)
    q, k, v = _heads(x @ wq.t(), head_dim), _heads(x @ wk.t(), head_dim), _heads(x @ wv.t(), head_dim)
    group = q.shape[1] // k.shape[1]
    rq = torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps)
    rk = torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps)
    qn, kn = q * rq, k * rk
    qw, kw = qn * gq, kn * gk
    qr = qw * c + _rotate_half(qw) * s
    kr = kw * c + _rotate_half(kw) * s
    kr_e, v_e = kr.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    tanh = torch.tanh((qr @ kr_e.transpose(-1, -2)) * (scaling / softcap))
    seq = q.shape[2]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
    p = torch.softmax((tanh * softcap).masked_fill(causal, -math.inf), dim=-1)
    o_flat = _merge(p @ v_e)
    g = grad_output.to(dt)
    grad_o_weight = g.flatten(0, 1).t() @ o_flat.flatten(0, 1)
    d_o = _heads(g @ wo, head_dim)
    d_p = d_o @ v_e.transpose(-1, -2)
    d_v = (p.transpose(-1, -2) @ d_o).unflatten(1, (-1, group)).sum(2)
    d_s = p * (d_p - (d_p * p).sum(-1, keepdim=True)) * (1.0 - tanh.pow(2)) * scaling
    d_qr = d_s @ kr_e
    d_kr = (d_s.transpose(-1, -2) @ qr).unflatten(1, (-1, group)).sum(2)

    def norm_rope_backward(d_rot, normed, r, gain):
        d_w = d_rot * c + _rotate_half_t(d_rot * s)
        grad_gain = (d_w * normed).sum(dim=(0, 1, 2))
        d_n = d_w * gain
        if norm_projection:
            d_n = d_n - normed * (d_n * normed).mean(-1, keepdim=True)
        return _merge(r * d_n), grad_gain

    d_q, grad_q_norm = norm_rope_backward(d_qr, qn, rq, gq)
    d_k, grad_k_norm = norm_rope_backward(d_kr, kn, rk, gk)
    d_v = _merge(d_v)
    grad_x = d_q @ wq + d_k @ wk + d_v @ wv
    xf = x.flatten(0, 1)
    grads = (grad_x, d_q.flatten(0, 1).t() @ xf, d_k.flatten(0, 1).t() @ xf,
             d_v.flatten(0, 1).t() @ xf, grad_o_weight, grad_q_norm, grad_k_norm)
    return tuple(t.to(hidden_states.dtype) for t in grads)


def reference(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight,
              q_norm_weight, k_norm_weight, scaling, attn_logit_softcapping, rms_norm_eps):
    return _backward(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight,
                     o_weight, q_norm_weight, k_norm_weight, scaling, attn_logit_softcapping,
                     rms_norm_eps)


def dropped_term(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight,
                 q_norm_weight, k_norm_weight, scaling, attn_logit_softcapping, rms_norm_eps):
    """Mutant: back-propagates through RMSNorm as if the 1/rms factor were a constant."""
    return _backward(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight,
                     o_weight, q_norm_weight, k_norm_weight, scaling, attn_logit_softcapping,
                     rms_norm_eps, norm_projection=False)


def reordered(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight,
              q_norm_weight, k_norm_weight, scaling, attn_logit_softcapping, rms_norm_eps):
    """Valid alternative: the forward written once and differentiated by autograd."""
    dt = compute_dtype(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight,
                       o_weight, q_norm_weight, k_norm_weight)
    head_dim = cos.shape[-1]
    leaves = [t.detach().to(dt).requires_grad_(True) for t in
              (hidden_states, q_weight, k_weight, v_weight, o_weight, q_norm_weight,
               k_norm_weight)]
    x, wq, wk, wv, wo, nq, nk = leaves
    c, s = cos.to(dt).unsqueeze(1), sin.to(dt).unsqueeze(1)
    with torch.enable_grad():
        def norm_rope(t, weight):
            t = t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + rms_norm_eps) * (1.0 + weight)
            return t * c + _rotate_half(t) * s

        q = norm_rope(_heads(x @ wq.t(), head_dim), nq)
        k = norm_rope(_heads(x @ wk.t(), head_dim), nk)
        v = _heads(x @ wv.t(), head_dim)
        group = q.shape[1] // k.shape[1]
        q = q.unflatten(1, (-1, group))
        logits = torch.einsum("bkgsd,bktd->bkgst", q, k) * scaling
        capped = attn_logit_softcapping * torch.tanh(logits / attn_logit_softcapping)
        seq = x.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        p = torch.softmax(capped.masked_fill(causal, -math.inf), dim=-1)
        o = torch.einsum("bkgst,bktd->bkgsd", p, v).flatten(1, 2)
        out = _merge(o) @ wo.t()
        grads = torch.autograd.grad(out, leaves, grad_output.to(dt))
    return tuple(t.to(hidden_states.dtype) for t in grads)


def cost(w: Workload) -> Cost:
    b, s, h, d = w.batch, w.seq_len, w.hidden, w.head_dim
    tokens = b * s
    qo, kvo = w.q_heads * d, w.kv_heads * d
    proj_fwd = 2.0 * tokens * h * (qo + 2 * kvo)
    proj_bwd = 2.0 * proj_fwd + 2.0 * 2.0 * tokens * h * qo  # input+weight grads, W_o grads
    pairs = b * w.q_heads * s * (s + 1) / 2  # causal logits
    attn = 2.0 * pairs * d * (2 + 4)  # forward QK, PV; backward dP, dV, dQ, dK
    elementwise = 12.0 * b * w.q_heads * s * s + 20.0 * tokens * (qo + kvo)
    read = 4 * (3 * tokens * h + 2 * (qo + 2 * kvo) * h + 2 * d) + 2 * 4 * tokens * d
    written = 4 * (tokens * h + (2 * qo + 2 * kvo) * h + 2 * d)
    return Cost(flops={"fp32": proj_fwd + proj_bwd + attn + elementwise},
                bytes=float(read + written))
