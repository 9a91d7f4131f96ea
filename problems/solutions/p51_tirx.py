"""p51 sparse MoE dispatch + combine (gpt-oss: 128 experts, top-4, fp32) in TIRx.

Hybrid. Eager PyTorch sorts the (token, slot) pairs by expert (one argsort, one bincount and
one host sync for the group sizes, against the reference's sync per expert) and runs the two
fp32 GEMMs of every expert on contiguous row ranges. Three TIRx kernels (one module) do the
rest:

* dispatch: gather the hidden rows of the sorted pairs into one contiguous activation buffer;
* activation: add the gate/up bias, de-interleave gate/up columns, clamp, and apply
  ``gate * sigmoid(1.702 * gate) * (up + 1)`` in one pass;
* combine: for each token, sum its top-k expert rows plus the down bias, weighted by the
  routing weights, with no atomics (each token reads its own k rows).
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

THREADS = 256
GLU_ALPHA = 1.702
GLU_LIMIT = 7.0


@T.prim_func
def dispatch(hidden_ptr: T.handle, src_ptr: T.handle, out_ptr: T.handle):
    tokens = T.int32()
    rows = T.int32()
    cols = T.int32()
    Hidden = T.match_buffer(hidden_ptr, (tokens, cols), "float32")
    Src = T.match_buffer(src_ptr, (rows,), "int32")
    Out = T.match_buffer(out_ptr, (rows, cols), "float32")
    T.device_entry()
    row = T.cta_id([rows])
    tx = T.thread_id([THREADS])
    token = Src[row]
    for t in T.serial(T.ceildiv(cols, THREADS)):
        c = t * THREADS + tx
        if c < cols:
            Out[row, c] = Hidden[token, c]


@T.prim_func
def activation(gu_ptr: T.handle, bias_ptr: T.handle, expert_ptr: T.handle, act_ptr: T.handle):
    rows = T.int32()
    inter = T.int32()
    experts = T.int32()
    GateUp = T.match_buffer(gu_ptr, (rows, inter * 2), "float32")
    Bias = T.match_buffer(bias_ptr, (experts, inter * 2), "float32")
    Expert = T.match_buffer(expert_ptr, (rows,), "int32")
    Act = T.match_buffer(act_ptr, (rows, inter), "float32")
    T.device_entry()
    row = T.cta_id([rows])
    tx = T.thread_id([THREADS])
    e = Expert[row]
    for t in T.serial(T.ceildiv(inter, THREADS)):
        c = t * THREADS + tx
        if c < inter:
            gate = T.min(GateUp[row, 2 * c] + Bias[e, 2 * c], T.float32(GLU_LIMIT))
            up = T.max(
                T.min(GateUp[row, 2 * c + 1] + Bias[e, 2 * c + 1], T.float32(GLU_LIMIT)),
                T.float32(-GLU_LIMIT),
            )
            sig = T.float32(1) / (T.float32(1) + T.exp(-(gate * T.float32(GLU_ALPHA))))
            Act[row, c] = gate * sig * (up + T.float32(1))


@T.prim_func
def combine(
    y_ptr: T.handle,
    bias_ptr: T.handle,
    pos_ptr: T.handle,
    idx_ptr: T.handle,
    weights_ptr: T.handle,
    out_ptr: T.handle,
):
    rows = T.int32()
    cols = T.int32()
    experts = T.int32()
    tokens = T.int32()
    top_k = T.int32()
    Y = T.match_buffer(y_ptr, (rows, cols), "float32")
    Bias = T.match_buffer(bias_ptr, (experts, cols), "float32")
    Pos = T.match_buffer(pos_ptr, (tokens, top_k), "int32")
    Idx = T.match_buffer(idx_ptr, (tokens, top_k), "int64")
    Weights = T.match_buffer(weights_ptr, (tokens, experts), "float32")
    Out = T.match_buffer(out_ptr, (tokens, cols), "float32")
    T.device_entry()
    token = T.cta_id([tokens])
    tx = T.thread_id([THREADS])
    acc = T.alloc_local((1,), "float32")
    for t in T.serial(T.ceildiv(cols, THREADS)):
        c = t * THREADS + tx
        if c < cols:
            acc[0] = T.float32(0)
            for j in T.serial(top_k):
                e = T.Cast("int32", Idx[token, j])
                acc[0] = acc[0] + (Y[Pos[token, j], c] + Bias[e, c]) * Weights[token, e]
            Out[token, c] = acc[0]


def _target() -> dict[str, str]:
    """The CUDA target of the current GPU (sm_90a on an H200; sm_90a when no GPU is visible)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return {"kind": "cuda", "arch": f"sm_{major}{minor}{'a' if major >= 9 else ''}"}
    return {"kind": "cuda", "arch": "sm_90a"}


_EXE: list[object] = []
_FNS: dict[str, Any] = {}


def _kernels() -> dict[str, object]:
    """The three device functions, built once (NVRTC compiles them at their first call)."""
    if not _FNS:
        exe = tvm.compile(
            tvm.IRModule({"dispatch": dispatch, "activation": activation, "combine": combine}),
            target=tvm.target.Target(_target()),
            tir_pipeline="tirx",
        )
        _EXE.append(exe)
        for name in ("dispatch", "activation", "combine"):
            _FNS[name] = exe[name]
    return _FNS


def solve(
    hidden_states,
    router_indices,
    routing_weights,
    gate_up_proj,
    gate_up_proj_bias,
    down_proj,
    down_proj_bias,
):
    fns = _kernels()
    tokens, hidden = hidden_states.shape
    experts, _, two_inter = gate_up_proj.shape
    top_k = router_indices.shape[1]
    flat = router_indices.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts).tolist()
    src_token = (order // top_k).to(torch.int32)
    sorted_expert = flat[order].to(torch.int32)
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel(), device=order.device)
    position = position.view(tokens, top_k).to(torch.int32)

    rows = order.numel()
    x = torch.empty(rows, hidden, dtype=hidden_states.dtype, device=hidden_states.device)
    fns["dispatch"](hidden_states.contiguous(), src_token, x)
    gate_up = torch.empty(rows, two_inter, dtype=x.dtype, device=x.device)
    start = 0
    for e, n in enumerate(counts):
        if n:
            torch.matmul(x[start : start + n], gate_up_proj[e], out=gate_up[start : start + n])
        start += n
    act = torch.empty(rows, two_inter // 2, dtype=x.dtype, device=x.device)
    fns["activation"](gate_up, gate_up_proj_bias.contiguous(), sorted_expert, act)
    y = torch.empty(rows, hidden, dtype=x.dtype, device=x.device)
    start = 0
    for e, n in enumerate(counts):
        if n:
            torch.matmul(act[start : start + n], down_proj[e], out=y[start : start + n])
        start += n
    out = torch.empty_like(hidden_states)
    fns["combine"](
        y,
        down_proj_bias.contiguous(),
        position,
        router_indices.contiguous(),
        routing_weights.contiguous(),
        out,
    )
    return out
