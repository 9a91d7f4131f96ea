"""Shared pieces of the FlashInfer-derived attention problems (GQA/MLA, paged and ragged).

Geometry helpers draw the per-seed sequence order and page assignment; :func:`attend` is the
softmax attention of one sequence (grouped heads, optional causal mask aligned to the end of
the keys) returning the output and the base-2 log-sum-exp; :func:`attend_split` is the same
computation done as two key blocks merged through their log-sum-exps (a valid reordering).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from problems.common import compute_dtype, randperm
from problems.spec import Cost

LN2 = math.log(2.0)
# Upper bound on score-matrix elements per block: bounds reference memory (8 bytes each at
# the float64 anchor, so at most about 2 GiB per block).
SCORE_BLOCK_ELEMENTS = 1 << 28


def lse_dtype(q: torch.Tensor) -> torch.dtype:
    """The dtype of the lse output: float32, or float64 at the anchor."""
    return torch.promote_types(q.dtype, torch.float32)


def sequence_order(g: torch.Generator, count: int) -> list[int]:
    """A per-seed permutation of ``range(count)``, drawn on the CPU from ``g``'s seed.

    Problems keep the captured multiset of sequence lengths (so the cost is fixed) and shuffle
    which slot of the batch holds which sequence.
    """
    cpu = torch.Generator().manual_seed((g.initial_seed() * 7919 + 17) & 0x7FFF_FFFF_FFFF_FFFF)
    return [int(i) for i in torch.randperm(count, generator=cpu)]


def permute(order: Sequence[int], values: Sequence[int]) -> list[int]:
    """``values`` rearranged by ``order``."""
    return [int(values[i]) for i in order]


def indptr(lengths: Sequence[int], device: str | torch.device, dtype=torch.int32) -> torch.Tensor:
    """Offsets ``[0, l0, l0 + l1, ...]`` of consecutive segments."""
    out = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    out[1:] = torch.tensor(list(lengths), dtype=torch.int64).cumsum(0)
    return out.to(device=device, dtype=dtype)


def draw_pages(
    g: torch.Generator, num_pages: int, used: int, device: str | torch.device
) -> torch.Tensor:
    """``used`` distinct page ids from a pool of ``num_pages``, in random order (int32)."""
    if used > num_pages:
        raise ValueError(f"{used} pages do not fit a pool of {num_pages}")
    return randperm(g, num_pages, device)[:used].to(torch.int32)


def gather_pages(
    cache: torch.Tensor, page_ids: torch.Tensor, num_tokens: int, dt: torch.dtype
) -> torch.Tensor:
    """The first ``num_tokens`` tokens stored in ``cache[page_ids]`` (pages in order).

    ``cache`` is ``[num_pages, page_size, ...]``; every page but the last is full, so the
    tokens are the concatenated pages truncated to ``num_tokens``. Converted to ``dt`` after
    the gather so that the anchor never widens the whole pool.
    """
    pages = cache[page_ids.to(torch.long)]
    return pages.flatten(0, 1)[:num_tokens].to(dt)


def _partial(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    diag: int | None,
    q_offset: int = 0,
    k_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised output ``[Lq, Hq, Dv]`` and natural-log lse ``[Lq, Hq]`` over one key block.

    With ``diag`` set, query row ``q_offset + i`` sees key ``k_offset + j`` only when
    ``k_offset + j <= q_offset + i + diag``. Rows whose keys are all masked get output 0 and
    lse -inf.
    """
    lq, hq, d = q.shape
    lk, hk, _ = k.shape
    qg = q.reshape(lq, hk, hq // hk, d).permute(1, 2, 0, 3)  # [Hk, group, Lq, D]
    s = torch.matmul(qg, k.permute(1, 2, 0).unsqueeze(1)) * scale  # [Hk, group, Lq, Lk]
    if diag is not None:
        qpos = torch.arange(q_offset, q_offset + lq, device=q.device).unsqueeze(1)
        kpos = torch.arange(k_offset, k_offset + lk, device=q.device).unsqueeze(0)
        s = s.masked_fill(kpos > qpos + diag, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - safe)
    out = torch.matmul(p, v.permute(1, 0, 2).unsqueeze(1))  # [Hk, group, Lq, Dv]
    out = out.permute(2, 0, 1, 3).reshape(lq, hq, v.shape[-1])
    return out, lse.squeeze(-1).permute(2, 0, 1).reshape(lq, hq)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of one sequence with grouped heads.

    ``q`` is ``[Lq, Hq, D]``, ``k`` ``[Lk, Hk, D]``, ``v`` ``[Lk, Hk, Dv]`` (all in the compute
    dtype), query head ``h`` reads key/value head ``h // (Hq // Hk)``. With ``causal`` the
    queries are the last ``Lq`` positions: query ``i`` sees keys ``j <= i + Lk - Lq``.
    Returns the output ``[Lq, Hq, Dv]`` and the base-2 log-sum-exp ``[Lq, Hq]`` of the scaled
    scores. Queries are processed in blocks that bound the score matrix's size.
    """
    lq, hq, _ = q.shape
    lk = k.shape[0]
    diag = lk - lq if causal else None
    rows = max(1, SCORE_BLOCK_ELEMENTS // max(1, hq * lk))
    parts = [_partial(q[a : a + rows], k, v, scale, diag, q_offset=a) for a in range(0, lq, rows)]
    if len(parts) == 1:
        out, lse = parts[0]
    else:
        out = torch.cat([o for o, _ in parts])
        lse = torch.cat([s for _, s in parts])
    return out, lse / LN2


def attend_split(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attend` computed as two key blocks merged through their log-sum-exps."""
    lq, hq, _ = q.shape
    lk = k.shape[0]
    diag = lk - lq if causal else None
    cut = lk // 2
    if cut == 0:
        return attend(q, k, v, scale, causal)
    rows = max(1, SCORE_BLOCK_ELEMENTS // max(1, hq * lk))
    outs, lses = [], []
    for a in range(0, lq, rows):
        qb = q[a : a + rows]
        o1, l1 = _partial(qb, k[:cut], v[:cut], scale, diag, q_offset=a)
        o2, l2 = _partial(qb, k[cut:], v[cut:], scale, diag, q_offset=a, k_offset=cut)
        lse = torch.logaddexp(l1, l2)
        outs.append(o1 * torch.exp(l1 - lse).unsqueeze(-1) + o2 * torch.exp(l2 - lse).unsqueeze(-1))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses) / LN2


Attend = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _offsets(indptr_t: torch.Tensor | None, count: int) -> list[int]:
    return list(range(count + 1)) if indptr_t is None else [int(x) for x in indptr_t.tolist()]


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor | None,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor | None,
    scale: float,
    causal: bool,
    attn: Attend = attend,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GQA over a paged cache ``[num_pages, page_size, Hk, D]``, one sequence at a time.

    Sequence ``b`` owns queries ``qo_indptr[b]:qo_indptr[b+1]`` (one query each when
    ``qo_indptr`` is None: decode) and pages ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``; its
    last page holds ``kv_last_page_len[b]`` tokens (the page size when None).
    """
    dt = compute_dtype(q, k_cache, v_cache)
    page_size = k_cache.shape[1]
    batch = kv_indptr.shape[0] - 1
    qo = _offsets(qo_indptr, batch)
    kv = _offsets(kv_indptr, batch)
    last = [page_size] * batch if kv_last_page_len is None else kv_last_page_len.tolist()
    out = torch.empty(q.shape[0], q.shape[1], v_cache.shape[-1], dtype=dt, device=q.device)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=dt, device=q.device)
    for b in range(batch):
        pages = kv_indices[kv[b] : kv[b + 1]]
        tokens = (pages.shape[0] - 1) * page_size + int(last[b])
        k = gather_pages(k_cache, pages, tokens, dt)
        v = gather_pages(v_cache, pages, tokens, dt)
        o, s = attn(q[qo[b] : qo[b + 1]].to(dt), k, v, scale, causal)
        out[qo[b] : qo[b + 1]] = o
        lse[qo[b] : qo[b + 1]] = s
    return out.to(q.dtype), lse.to(lse_dtype(q))


def ragged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    scale: float,
    causal: bool,
    attn: Attend = attend,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GQA over ragged (varlen) q/k/v: sequence ``b`` owns rows ``indptr[b]:indptr[b+1]``."""
    dt = compute_dtype(q, k, v)
    batch = qo_indptr.shape[0] - 1
    qo = _offsets(qo_indptr, batch)
    kv = _offsets(kv_indptr, batch)
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=dt, device=q.device)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=dt, device=q.device)
    for b in range(batch):
        o, s = attn(
            q[qo[b] : qo[b + 1]].to(dt),
            k[kv[b] : kv[b + 1]].to(dt),
            v[kv[b] : kv[b + 1]].to(dt),
            scale,
            causal,
        )
        out[qo[b] : qo[b + 1]] = o
        lse[qo[b] : qo[b + 1]] = s
    return out.to(q.dtype), lse.to(lse_dtype(q))


def mla_paged_attention(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    ckv_cache: torch.Tensor,
    kpe_cache: torch.Tensor,
    qo_indptr: torch.Tensor | None,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    scale: float,
    causal: bool,
    attn: Attend = attend,
    with_pe: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA over page-size-1 caches: score = q_nope·ckv + q_pe·kpe, value = ckv.

    All query heads share the single latent "head" (``ckv_cache [P, 1, Dc]``,
    ``kpe_cache [P, 1, Dp]``). ``with_pe=False`` drops the positional term (a mutant).
    """
    dt = compute_dtype(q_nope, q_pe, ckv_cache, kpe_cache)
    batch = kv_indptr.shape[0] - 1
    qo = _offsets(qo_indptr, batch)
    kv = _offsets(kv_indptr, batch)
    out = torch.empty(*q_nope.shape, dtype=dt, device=q_nope.device)
    lse = torch.empty(q_nope.shape[0], q_nope.shape[1], dtype=dt, device=q_nope.device)
    for b in range(batch):
        pages = kv_indices[kv[b] : kv[b + 1]]
        ckv = gather_pages(ckv_cache, pages, pages.shape[0], dt).unsqueeze(1)
        q = q_nope[qo[b] : qo[b + 1]].to(dt)
        k = ckv
        if with_pe:
            kpe = gather_pages(kpe_cache, pages, pages.shape[0], dt).unsqueeze(1)
            q = torch.cat([q, q_pe[qo[b] : qo[b + 1]].to(dt)], dim=-1)
            k = torch.cat([ckv, kpe], dim=-1)
        o, s = attn(q, k, ckv, scale, causal)
        out[qo[b] : qo[b + 1]] = o
        lse[qo[b] : qo[b + 1]] = s
    return out.to(q_nope.dtype), lse.to(lse_dtype(q_nope))


def causal_pairs(q_lens: Sequence[int], kv_lens: Sequence[int]) -> int:
    """Visible (query, key) pairs of causal prefill with queries aligned to the keys' end."""
    return sum(lq * (lk - lq) + lq * (lq + 1) // 2 for lq, lk in zip(q_lens, kv_lens))


def attention_cost(pairs: int, heads: int, d_qk: int, d_vo: int, nbytes: float) -> Cost:
    """bf16 matmul FLOPs of scores and values, fp32 softmax work, and the given bytes."""
    return Cost(
        flops={"bf16": 2.0 * pairs * heads * (d_qk + d_vo), "fp32": 5.0 * pairs * heads},
        bytes=float(nbytes),
    )
