"""Qwen3-Omni vision patch merger in bfloat16. hidden [num_patches, 1536] holds the patch
features of several images/videos back to back; grid_thw (int64 [num_grids, 3]) gives each
one's (t, h, w) patch grid in raster order (h and w even). LayerNorm every patch over its 1,536
channels (eps 1e-6, affine weight and bias; result rounded to bf16), then merge each 2×2 block of
neighbouring patches within a frame into one 6,144-channel token (channel order: block row,
block column, channel; merged tokens in raster order of blocks, grid after grid), and apply the
MLP fc2(GELU(fc1(x))) with exact (erf) GELU, fc1 [6144, 6144] and fc2 [3584, 6144] with biases
(bf16 GEMMs with float32 accumulation). Output [num_patches / 4, 3584] bfloat16. Grid shapes
change from draw to draw; the total number of patches does not."""

from __future__ import annotations

import math
from typing import Any

import torch

from problems.common import compute_dtype, generator, randint, randn, randperm
from problems.spec import Cost, Workload

ID = "p27"
SLUG = "patch_merger_mlp_qwen3_omni_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/020_vision_patch_merger_spatial_shuffle_mlp (task #20), "
    "workload record 11"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Grid shapes are re-drawn per seed (upstream uses four 128×128 images): the grids come in "
    "two pairs that share a row count (pair_rows merged rows) and split a fixed width at random, "
    "with t ∈ {1, 2} and random transposition, so the total patch count stays 65,536. Rounding "
    "points follow upstream (LayerNorm output, fc1 output and GELU output in the input dtype, "
    "GEMMs at the input dtype; no-ops on the float64 anchor). LayerNorm weight/bias drawn as "
    "1 + 0.1·N and 0.1·N, linear weights as N(0, 1/fan_in), biases as 0.1·N."
)
WORKLOAD: dict[str, Any] = {"num_patches": 65536, "num_grids": 4, "pair_rows": 64, "hidden": 1536,
            "out_hidden": 3584, "merge": 2, "eps": 1e-6}
SMOKE = {"num_patches": 256, "num_grids": 4, "pair_rows": 4, "hidden": 16, "out_hidden": 24,
         "merge": 2, "eps": 1e-6}
INPUTS = ("hidden", "grid_thw", "ln_weight", "ln_bias", "fc1_weight", "fc1_bias", "fc2_weight",
          "fc2_bias")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def _grids(g: torch.Generator, w: Workload) -> list[list[int]]:
    """Four (t, h, w) patch grids: two pairs, each pair filling num_patches / 2 patches."""
    m = w.merge
    pair_merged = w.num_patches // (m * m) // 2
    grids: list[list[int]] = []
    for _ in range(w.num_grids // 2):
        t = 1 + int(randint(g, 0, 2, (1,), "cpu"))
        width = pair_merged // (w.pair_rows * t)
        margin = max(1, width // 8)
        left = int(randint(g, margin, width - margin + 1, (1,), "cpu"))
        for cols in (left, width - left):
            rows_cols = [w.pair_rows * m, cols * m]
            if int(randint(g, 0, 2, (1,), "cpu")):
                rows_cols.reverse()
            grids.append([t, *rows_cols])
    order = randperm(g, len(grids), "cpu").tolist()
    return [grids[i] for i in order]


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    cpu_g = generator(seed, "cpu")
    bf = torch.bfloat16
    expanded = w.hidden * w.merge * w.merge
    grid_thw = torch.tensor(_grids(cpu_g, w), dtype=torch.int64, device=device)
    x = randn(g, (w.num_patches, w.hidden), bf, device)
    ln_w = randn(g, (w.hidden,), bf, device, std=0.1, mean=1.0)
    ln_b = randn(g, (w.hidden,), bf, device, std=0.1)
    std = 1.0 / math.sqrt(expanded)
    w1 = randn(g, (expanded, expanded), bf, device, std=std)
    b1 = randn(g, (expanded,), bf, device, std=0.1)
    w2 = randn(g, (w.out_hidden, expanded), bf, device, std=std)
    b2 = randn(g, (w.out_hidden,), bf, device, std=0.1)
    return [x, grid_thw, ln_w, ln_b, w1, b1, w2, b2]


def _layernorm(hidden, ln_weight, ln_bias, dt):
    x = hidden.to(dt)
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + WORKLOAD["eps"]) * ln_weight.to(dt) + ln_bias.to(dt)
    return y.to(hidden.dtype)


def _merge(xn: torch.Tensor, grid_thw: torch.Tensor, permute: bool = True) -> torch.Tensor:
    m = WORKLOAD["merge"]
    c = xn.shape[-1]
    pieces, offset = [], 0
    for t, h, w in grid_thw.tolist():
        block = xn[offset:offset + t * h * w]
        offset += t * h * w
        if permute:
            block = block.view(t, h // m, m, w // m, m, c).permute(0, 1, 3, 2, 4, 5)
        pieces.append(block.reshape(-1, m * m * c))
    return torch.cat(pieces, dim=0)


def _mlp(merged, fc1_weight, fc1_bias, fc2_weight, fc2_bias, dt):
    lin = torch.nn.functional.linear
    h = lin(merged, fc1_weight, fc1_bias)
    a = torch.nn.functional.gelu(h.to(dt)).to(merged.dtype)
    return lin(a, fc2_weight, fc2_bias)


def reference(hidden, grid_thw, ln_weight, ln_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    dt = compute_dtype(hidden, ln_weight, ln_bias, fc1_weight, fc2_weight)
    merged = _merge(_layernorm(hidden, ln_weight, ln_bias, dt), grid_thw)
    return _mlp(merged, fc1_weight, fc1_bias, fc2_weight, fc2_bias, dt)


def dropped_term(hidden, grid_thw, ln_weight, ln_bias, fc1_weight, fc1_bias, fc2_weight,
                 fc2_bias):
    """Mutant: merges four consecutive patches in raster order (forgets the 2×2 permutation)."""
    dt = compute_dtype(hidden, ln_weight, ln_bias, fc1_weight, fc2_weight)
    merged = _merge(_layernorm(hidden, ln_weight, ln_bias, dt), grid_thw, permute=False)
    return _mlp(merged, fc1_weight, fc1_bias, fc2_weight, fc2_bias, dt)


def reordered(hidden, grid_thw, ln_weight, ln_bias, fc1_weight, fc1_bias, fc2_weight,
              fc2_bias):
    """Valid alternative: the merge as one gather through a precomputed index; fc2 as the sum of
    two K-halves accumulated in the compute dtype."""
    dt = compute_dtype(hidden, ln_weight, ln_bias, fc1_weight, fc2_weight)
    m = WORKLOAD["merge"]
    xn = _layernorm(hidden, ln_weight, ln_bias, dt)
    index, offset = [], 0
    for t, h, w in grid_thw.tolist():
        ids = torch.arange(t * h * w, device=hidden.device).view(t, h // m, m, w // m, m)
        index.append(ids.permute(0, 1, 3, 2, 4).reshape(-1) + offset)
        offset += t * h * w
    merged = xn.index_select(0, torch.cat(index)).reshape(-1, m * m * xn.shape[-1])
    h1 = torch.nn.functional.linear(merged, fc1_weight, fc1_bias)
    a = torch.nn.functional.gelu(h1.to(dt)).to(hidden.dtype).to(dt)
    w2 = fc2_weight.to(dt)
    half = w2.shape[1] // 2
    out = a[:, :half] @ w2[:, :half].t() + a[:, half:] @ w2[:, half:].t() + fc2_bias.to(dt)
    return out.to(hidden.dtype)


def cost(w: Workload) -> Cost:
    expanded = w.hidden * w.merge * w.merge
    merged = w.num_patches // (w.merge * w.merge)
    matmul = 2.0 * merged * expanded * (expanded + w.out_hidden)
    elementwise = 8.0 * w.num_patches * w.hidden + 10.0 * merged * expanded
    read = w.num_patches * w.hidden + 2 * w.hidden + expanded * (expanded + w.out_hidden)
    read += expanded + w.out_hidden
    return Cost(flops={"bf16": matmul, "fp32": elementwise},
                bytes=2.0 * (read + merged * w.out_hidden) + 8.0 * 3 * w.num_grids)
