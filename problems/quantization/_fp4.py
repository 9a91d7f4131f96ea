"""NVFP4 packing and software dequantization shared by the Quantization problems (private
helper, no problem).

An NVFP4 tensor with K values per row is stored as

* ``packed``: uint8 ``[..., K/2]``, two E2M1 codes per byte — element ``2j`` in the low nibble,
  element ``2j+1`` in the high nibble. A code is sign bit (8) | magnitude index 0–7 into
  (0, 0.5, 1, 1.5, 2, 3, 4, 6);
* ``scales``: float8_e4m3fn ``[..., K/16]``, one decode scale per 16 consecutive values;
* ``global_scale``: a float32 tensor of shape [1] (the global decode scale).

Value = E2M1(code) · scale · global_scale. Hopper has no FP4 tensor cores, so references (and
kernels) dequantize in software through a 16-entry lookup table.
"""

from __future__ import annotations

import torch

from problems.common import FP8_E4M3_MAX

BLOCK = 16
# A quantized tensor as the problems pass it: (packed e2m1 pairs, block scales, global scale).
Quantized = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
E2M1_MAX = 6.0
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: Rounding boundaries between consecutive magnitudes (midpoints of E2M1_MAGNITUDES).
_BOUNDARIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_E4M3_MIN_POSITIVE = 2.0**-9


def e2m1_table(dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """The 16 code values (codes 8–15 are the negatives of 0–7) as a lookup table."""
    mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float64, device=device)
    return torch.cat((mags, -mags)).to(dtype)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """E2M1 codes ``[..., K]`` (int64) from packed bytes ``[..., K/2]`` (low nibble first)."""
    p = packed.to(torch.int64)
    codes = torch.stack((p & 0xF, p >> 4), dim=-1)
    return codes.flatten(-2)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Packed uint8 ``[..., K/2]`` from codes ``[..., K]`` in 0–15."""
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def dequantize(
    packed: torch.Tensor, scales: torch.Tensor, global_scale: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Values ``[..., K]`` in ``dtype``: table lookup · block scale · global scale."""
    table = e2m1_table(dtype, packed.device)
    values = table[unpack_codes(packed)]
    k = values.shape[-1]
    blocked = values.view(*values.shape[:-1], k // BLOCK, BLOCK) * scales.to(dtype).unsqueeze(-1)
    return blocked.view(*values.shape[:-1], k) * global_scale.to(dtype)


def _round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Codes of the nearest E2M1 values to ``x`` (already within ±6)."""
    bounds = torch.tensor(_BOUNDARIES, dtype=x.dtype, device=x.device)
    magnitude = torch.bucketize(x.abs(), bounds)
    return magnitude + 8 * (x < 0).to(magnitude.dtype)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Offline NVFP4 quantization of a float tensor (a weight or a stored activation).

    The global decode scale maps the tensor's amax to 448 · 6; block decode scales
    (block amax / 6, in global units) are rounded to E4M3 and values are rounded to the
    nearest E2M1 after dividing by their decoded block scale. Returns (packed, scales,
    global_scale).
    """
    x32 = x.float()
    k = x32.shape[-1]
    if k % BLOCK:
        raise ValueError(f"last dimension {k} is not a multiple of {BLOCK}")
    amax = x32.abs().amax().clamp(min=1e-12)
    global_scale = (amax / (FP8_E4M3_MAX * E2M1_MAX)).to(torch.float32)
    blocks = x32.view(*x32.shape[:-1], k // BLOCK, BLOCK)
    block_scale = blocks.abs().amax(dim=-1) / E2M1_MAX / global_scale
    block_scale = block_scale.clamp(_E4M3_MIN_POSITIVE, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    decoded = block_scale.float() * global_scale
    scaled = (blocks / decoded.unsqueeze(-1)).clamp(-E2M1_MAX, E2M1_MAX)
    codes = _round_e2m1(scaled).view(*x32.shape)
    return pack_codes(codes), block_scale, global_scale.reshape(1)
