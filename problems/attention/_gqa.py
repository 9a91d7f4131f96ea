"""The GQA problem kits that sibling FlashInfer problems share (same semantics, other geometry).

A kit is the five functions a problem module defines — ``make_inputs``, ``reference``,
``dropped_term``, ``reordered`` and ``cost`` — for one attention layout. A problem module
unpacks the kit of its layout and keeps its own geometry in ``WORKLOAD``:

- :data:`PAGED_DECODE`: one query per sequence over a page-size-1 cache (p01, p02);
- :data:`PAGED_PREFILL`: causal prefill over a page-size-1 cache, per-sequence KV lengths
  (p04, p05);
- :data:`PAGED_PREFILL_LAST_PAGE`: causal prefill over a cache of larger pages whose last page
  is partly filled (p06, p07);
- :data:`RAGGED_PREFILL`: causal prefill over packed q/k/v with a cached prefix (p08, p09).

Inputs and outputs follow the problem's ``INPUTS`` and ``OUTPUTS``; the math is in
:mod:`problems.attention._paged`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from problems.attention._paged import (
    attend_split,
    attention_cost,
    causal_pairs,
    draw_pages,
    indptr,
    paged_attention,
    permute,
    ragged_attention,
    sequence_order,
)
from problems.common import generator, randn
from problems.spec import Cost, Workload

BF16 = 2  # bytes per bfloat16 element
FP32 = 4
INDEX = 4  # int32 indices


class Kit(NamedTuple):
    make_inputs: Callable[[int, str, Workload], list]
    reference: Callable[..., Any]
    dropped_term: Callable[..., Any]
    reordered: Callable[..., Any]
    cost: Callable[[Workload], Cost]


def _q_out_bytes(rows: int, w: Workload) -> int:
    """Read the queries, write the bf16 output and the fp32 lse."""
    return 2 * rows * w.num_qo_heads * w.head_dim * BF16 + rows * w.num_qo_heads * FP32


def _kv_bytes(tokens: int, w: Workload) -> int:
    return 2 * tokens * w.num_kv_heads * w.head_dim * BF16


def _caches(g: torch.Generator, w: Workload, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (w.num_pages, w.page_size, w.num_kv_heads, w.head_dim)
    return randn(g, shape, torch.bfloat16, device), randn(g, shape, torch.bfloat16, device)


def _queries(g: torch.Generator, rows: int, w: Workload, device: str) -> torch.Tensor:
    return randn(g, (rows, w.num_qo_heads, w.head_dim), torch.bfloat16, device)


# -- paged decode, page size 1 ---------------------------------------------------------------
def _decode_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    lens = permute(sequence_order(g, len(w.kv_lens)), w.kv_lens)
    q = _queries(g, len(lens), w, device)
    k_cache, v_cache = _caches(g, w, device)
    kv_indices = draw_pages(g, w.num_pages, sum(lens), device)
    return [q, k_cache, v_cache, indptr(lens, device), kv_indices, w.sm_scale]


def _decode_reference(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale: float):
    return paged_attention(q, k_cache, v_cache, None, kv_indptr, kv_indices, None, sm_scale, False)


def _decode_unscaled(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale: float):
    """Mutant: forgets the softmax scale."""
    return paged_attention(q, k_cache, v_cache, None, kv_indptr, kv_indices, None, 1.0, False)


def _decode_split(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale: float):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return paged_attention(
        q, k_cache, v_cache, None, kv_indptr, kv_indices, None, sm_scale, False, attend_split
    )


def _decode_cost(w: Workload) -> Cost:
    tokens, batch = sum(w.kv_lens), len(w.kv_lens)
    index_bytes = INDEX * (tokens + batch + 1)
    return attention_cost(
        tokens, w.num_qo_heads, w.head_dim, w.head_dim,
        _kv_bytes(tokens, w) + _q_out_bytes(batch, w) + index_bytes,
    )


PAGED_DECODE = Kit(_decode_inputs, _decode_reference, _decode_unscaled, _decode_split,
                   _decode_cost)


# -- paged causal prefill, page size 1 ---------------------------------------------------------
def _prefill_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    order = sequence_order(g, len(w.q_lens))
    q_lens, kv_lens = permute(order, w.q_lens), permute(order, w.kv_lens)
    q = _queries(g, sum(q_lens), w, device)
    k_cache, v_cache = _caches(g, w, device)
    kv_indices = draw_pages(g, w.num_pages, sum(kv_lens), device)
    return [
        q, k_cache, v_cache, indptr(q_lens, device), indptr(kv_lens, device), kv_indices,
        w.sm_scale,
    ]


def _prefill_reference(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale: float):
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, None, sm_scale, True
    )


def _prefill_unmasked(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale: float):
    """Mutant: forgets the causal mask."""
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, None, sm_scale, False
    )


def _prefill_split(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale: float):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, None, sm_scale, True, attend_split
    )


def _prefill_cost(w: Workload) -> Cost:
    total_q, tokens, batch = sum(w.q_lens), sum(w.kv_lens), len(w.q_lens)
    index_bytes = INDEX * (tokens + 2 * (batch + 1))
    return attention_cost(
        causal_pairs(w.q_lens, w.kv_lens), w.num_qo_heads, w.head_dim, w.head_dim,
        _kv_bytes(tokens, w) + _q_out_bytes(total_q, w) + index_bytes,
    )


PAGED_PREFILL = Kit(_prefill_inputs, _prefill_reference, _prefill_unmasked, _prefill_split,
                    _prefill_cost)


# -- paged causal prefill, larger pages with a partly filled last page ---------------------------
def _last_page_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    order = sequence_order(g, len(w.q_lens))
    q_lens, pages = permute(order, w.q_lens), permute(order, w.kv_pages)
    last = permute(order, w.kv_last_page_len)
    q = _queries(g, sum(q_lens), w, device)
    k_cache, v_cache = _caches(g, w, device)
    kv_indices = draw_pages(g, w.num_pages, sum(pages), device)
    last_len = torch.tensor(last, dtype=torch.int32, device=device)
    return [
        q, k_cache, v_cache, indptr(q_lens, device), indptr(pages, device), kv_indices, last_len,
        w.sm_scale,
    ]


def _last_page_reference(
    q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale
):
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale, True
    )


def _last_page_unmasked(
    q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale
):
    """Mutant: forgets the causal mask."""
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale, False
    )


def _last_page_split(
    q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale
):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale, True,
        attend_split,
    )


def kv_tokens(w: Workload) -> list[int]:
    """KV tokens per sequence: full pages plus the last page's fill."""
    return [(n - 1) * w.page_size + last for n, last in zip(w.kv_pages, w.kv_last_page_len)]


def _last_page_cost(w: Workload) -> Cost:
    total_q, batch, pages = sum(w.q_lens), len(w.q_lens), sum(w.kv_pages)
    tokens = kv_tokens(w)
    index_bytes = INDEX * (pages + 3 * batch + 2)
    return attention_cost(
        causal_pairs(w.q_lens, tokens), w.num_qo_heads, w.head_dim, w.head_dim,
        _kv_bytes(sum(tokens), w) + _q_out_bytes(total_q, w) + index_bytes,
    )


PAGED_PREFILL_LAST_PAGE = Kit(_last_page_inputs, _last_page_reference, _last_page_unmasked,
                              _last_page_split, _last_page_cost)


# -- ragged causal prefill with a cached prefix ------------------------------------------------
def _ragged_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    order = sequence_order(g, len(w.q_lens))
    q_lens = permute(order, w.q_lens)
    kv_lens = [lq + p for lq, p in zip(q_lens, permute(order, w.prefix_lens))]
    q = _queries(g, sum(q_lens), w, device)
    k = randn(g, (sum(kv_lens), w.num_kv_heads, w.head_dim), torch.bfloat16, device)
    v = randn(g, (sum(kv_lens), w.num_kv_heads, w.head_dim), torch.bfloat16, device)
    return [q, k, v, indptr(q_lens, device), indptr(kv_lens, device), w.sm_scale]


def _ragged_reference(q, k, v, qo_indptr, kv_indptr, sm_scale: float):
    return ragged_attention(q, k, v, qo_indptr, kv_indptr, sm_scale, True)


def _ragged_unmasked(q, k, v, qo_indptr, kv_indptr, sm_scale: float):
    """Mutant: forgets the causal mask."""
    return ragged_attention(q, k, v, qo_indptr, kv_indptr, sm_scale, False)


def _ragged_split(q, k, v, qo_indptr, kv_indptr, sm_scale: float):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return ragged_attention(q, k, v, qo_indptr, kv_indptr, sm_scale, True, attend_split)


def _ragged_cost(w: Workload) -> Cost:
    kv_lens = [lq + p for lq, p in zip(w.q_lens, w.prefix_lens)]
    total_q, total_kv, batch = sum(w.q_lens), sum(kv_lens), len(w.q_lens)
    return attention_cost(
        causal_pairs(w.q_lens, kv_lens), w.num_qo_heads, w.head_dim, w.head_dim,
        _kv_bytes(total_kv, w) + _q_out_bytes(total_q, w) + 8 * (batch + 1),
    )


RAGGED_PREFILL = Kit(_ragged_inputs, _ragged_reference, _ragged_unmasked, _ragged_split,
                     _ragged_cost)
