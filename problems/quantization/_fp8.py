"""FP8 E4M3 block scaling shared by the Quantization problems (private helper, no problem).

Block-scaled FP8 stores a tensor as E4M3 codes plus one float32 *decode* scale per block
(``value ≈ code · scale``): 1×128 blocks (per token and 128-channel group) for activations,
128×128 blocks for weights, as in DeepSeek-V3 / Qwen3 FP8 checkpoints. Quantizing divides by
``scale = amax(block) / 448`` and rounds to the nearest E4M3 value; the helpers here also measure
how far each rounding is from a tie so generators can keep decisions unambiguous.
"""

from __future__ import annotations

import torch

from problems.common import FP8_E4M3_MAX

FP8 = torch.float8_e4m3fn
#: Smallest scale, so an all-zero block does not divide by zero.
MIN_SCALE = 1e-12
_E4M3_MIN_NORMAL_EXP = -6  # 2**-6 is the smallest normal E4M3 magnitude
_E4M3_MANTISSA_BITS = 3


def block_shape(values: torch.Tensor, scales: torch.Tensor) -> tuple[int, int]:
    """The (rows, cols) block size implied by a 2-D tensor and its scale grid."""
    rows, cols = values.shape[-2:]
    srows, scols = scales.shape[-2:]
    if rows % srows or cols % scols:
        raise ValueError(f"scale grid {tuple(scales.shape)} does not tile {tuple(values.shape)}")
    return rows // srows, cols // scols


def _blocked(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """View ``[..., R, C]`` as ``[..., R/br, br, C/bc, bc]``."""
    *lead, rows, cols = x.shape
    return x.reshape(*lead, rows // block[0], block[0], cols // block[1], block[1])


def apply_scales(x: torch.Tensor, scales: torch.Tensor, divide: bool = False) -> torch.Tensor:
    """``x · scale`` (or ``x / scale``) with one scale per block; block size from shapes."""
    block = block_shape(x, scales)
    s = scales.to(x.dtype).unsqueeze(-1).unsqueeze(-3)
    xb = _blocked(x, block)
    out = xb / s if divide else xb * s
    return out.reshape(x.shape)


def dequantize(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``codes · scale`` in ``dtype`` for a block-scaled E4M3 tensor (block size from shapes)."""
    return apply_scales(codes.to(dtype), scales)


def block_amax(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """Largest magnitude per (rows, cols) block of the last two dimensions."""
    return _blocked(x.abs(), block).amax(dim=(-3, -1))


def compute_scales(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """Decode scales ``amax / 448`` per block (at least :data:`MIN_SCALE`)."""
    return (block_amax(x, block) / FP8_E4M3_MAX).clamp(min=MIN_SCALE)


def scaled_values(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``x / scale`` clamped to the E4M3 range: the value that is rounded to a code."""
    return apply_scales(x, scales, divide=True).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)


def quantize(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic block quantization: (E4M3 codes, decode scales in ``x``'s float dtype)."""
    scales = compute_scales(x, block)
    return scaled_values(x, scales).to(FP8), scales


def quantize_static(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Offline quantization of a float tensor (a weight): E4M3 codes and float32 scales."""
    x32 = x.float()
    codes, scales = quantize(x32, block)
    return codes, scales.float()


def _code_spacing(mag: torch.Tensor) -> torch.Tensor:
    """Distance between consecutive E4M3 codes around magnitudes ``mag`` (float64)."""
    exp = torch.floor(torch.log2(mag.clamp(min=2.0**_E4M3_MIN_NORMAL_EXP)))
    return torch.exp2(exp - _E4M3_MANTISSA_BITS)


def tie_distance(t: torch.Tensor) -> torch.Tensor:
    """Distance from each scaled value to the nearest E4M3 rounding tie, in units of the local
    code spacing (0 = exactly on a tie, 0.5 = exactly on a code). Computed in float64."""
    mag = t.double().abs()
    frac = torch.remainder(mag / _code_spacing(mag), 1.0)
    distance = (frac - 0.5).abs()
    # values clamped to ±448 never tie
    return torch.where(mag >= FP8_E4M3_MAX, torch.full_like(distance, 0.5), distance)


def requant_clear(t: torch.Tensor, margin: float) -> torch.Tensor:
    """Whether each scaled value of a *computed* intermediate is safely off a tie. Float32
    errors of a GEMM result, in scaled units (group amax ↦ 448), have an absolute part (from
    cancellation) and a part relative to the value (from the amax in the scale), so the value
    must be ``margin · (1 + |t| / 32)`` from a tie, or a quarter code spacing where codes are
    closer than that."""
    mag = t.double().abs()
    spacing = _code_spacing(mag)
    needed = torch.minimum(spacing / 4, margin * (1 + mag / 32))
    return tie_distance(t) * spacing >= needed


def _step_toward_zero(x: torch.Tensor) -> torch.Tensor:
    """The neighbouring representable value of each element toward zero (zeros stay)."""
    int_dtype = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    stepped = (x.view(int_dtype) - 1).view(x.dtype)  # sign-magnitude: smaller magnitude
    return torch.where(x == 0, x, stepped)


def nudge_off_ties(x: torch.Tensor, block: tuple[int, int], margin: float, rounds: int = 8
                   ) -> torch.Tensor:
    """A copy of ``x`` (a bf16/fp16/fp32 activation) whose dynamic quantization decisions are
    at least ``margin`` code spacings away from ties: offending elements are moved one step
    of ``x``'s dtype toward zero (which never raises a block's amax)."""
    y = x.clone()
    for _ in range(rounds):
        scales = compute_scales(y.double(), block)
        close = tie_distance(scaled_values(y.double(), scales)) < margin
        if not bool(close.any()):
            return y
        y = torch.where(close, _step_toward_zero(y), y)
    raise RuntimeError("could not move FP8 quantization decisions away from ties")


def quantization_margin(x: torch.Tensor, block: tuple[int, int]) -> float:
    """The smallest tie distance (in code spacings) of ``x``'s dynamic quantization."""
    scales = compute_scales(x.double(), block)
    return float(tie_distance(scaled_values(x.double(), scales)).min())


def random_weight(
    g: torch.Generator, out_features: int, in_features: int, device: str | torch.device,
    std: float | None = None, block: tuple[int, int] = (128, 128),
) -> tuple[torch.Tensor, torch.Tensor]:
    """A normal weight ``[out, in]`` (std ``1/sqrt(in)`` unless given), block-quantized offline."""
    scale = in_features**-0.5 if std is None else std
    w = torch.randn(out_features, in_features, generator=g, device=device) * scale
    return quantize_static(w, block)


def blockwise_matmul(
    a_codes: torch.Tensor, a_scales: torch.Tensor, b_codes: torch.Tensor, b_scales: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """``A · Bᵀ`` in the order a block-scaled FP8 kernel uses: one partial product of raw codes
    per K block, scaled by its activation and weight block scales, then summed over K blocks."""
    k = a_codes.shape[-1]
    ka = k // a_scales.shape[-1]
    kb = k // b_scales.shape[-1]
    if ka != kb:
        raise ValueError("activation and weight scales must share the K block size")
    rows_per_scale = b_codes.shape[0] // b_scales.shape[0]
    out = None
    for j in range(k // ka):
        cols = slice(j * ka, (j + 1) * ka)
        part = a_codes[..., cols].to(dtype) @ b_codes[:, cols].to(dtype).t()
        sb = b_scales[:, j].to(dtype).repeat_interleave(rows_per_scale)
        part = part * a_scales[..., j : j + 1].to(dtype) * sb
        out = part if out is None else out + part
    assert out is not None
    return out


def output_dtype(compute: torch.dtype, declared: torch.dtype) -> torch.dtype:
    """The dtype a reference returns: ``declared``, except float64 for the float64 anchor
    (whose inputs may hold no tensor of the declared dtype to follow)."""
    return torch.float64 if compute == torch.float64 else declared
