"""Block-table maintenance for a hybrid model with three KV-cache groups, then slot mapping
(vLLM v1 BlockTables). Step 1, staged writes, applied in order i = 0, 1, …: write i targets
request r = write_requests[i]; for each group g its staged block ids are
staged_ids[g, i, :staged_counts[g, i]]; a group whose allocation block size is e times its
kernel block size (block sizes 16/32/8, kernel block sizes 16/16/8, so e = 1/2/1) expands each
id b into b·e, b·e+1, …, b·e+e−1. The expanded ids are written into table g, row r, starting
at 0 if overwrite[i] else at num_blocks[g, r], and num_blocks[g, r] becomes start + count.
Step 2, slot mapping: batch entry j serves request idx_mapping[j] and owns tokens
query_start_loc[j] .. query_start_loc[j+1]−1; for token t at position p and group g with kernel
block size k, slot = table_g[request, p // k]·k + p % k (int64); tokens past the last batch
entry get −1. Returns the three int32 tables and the int32 counts (all updated in place) and
the int64 slot mappings [3, max_tokens]; everything compares exactly."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import generator, rand, randint, randperm
from problems.spec import Cost, Workload

ID = "p26"
SLUG = "hybrid_kv_group_block_table_update_slot_mapping_int32_int64"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = (
    "vllm-project/vllm@b9b6306e: tests/v1/worker/test_gpu_block_table.py::"
    "test_block_tables_apply_staged_writes_fuses_kv_groups; vllm/v1/worker/gpu/block_table.py"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Three KV groups as in the upstream test. Each request receives two staged writes (two "
    "permutations of the requests), with random overwrite flags and 0 to 4 staged ids per "
    "group; initial per-request block counts are 0 (fresh tables), as upstream draws them. "
    "Request lengths, positions and the batch order are re-drawn per seed."
)
WORKLOAD: dict[str, Any] = {
    "requests": 64, "max_tokens": 4096, "table_widths": (512, 1024, 512),
    "block_sizes": (16, 32, 8), "kernel_block_sizes": (16, 16, 8), "stage_capacity": 4,
    "id_pool": 2048,
}
SMOKE = {
    "requests": 8, "max_tokens": 64, "table_widths": (32, 64, 32),
    "block_sizes": (16, 32, 8), "kernel_block_sizes": (16, 16, 8), "stage_capacity": 4,
    "id_pool": 64,
}
INPUTS = (
    "block_table_0", "block_table_1", "block_table_2", "num_blocks", "write_requests",
    "overwrite", "staged_ids", "staged_counts", "idx_mapping", "query_start_loc", "positions",
)
OUTPUTS = ("block_table_0", "block_table_1", "block_table_2", "num_blocks", "slot_mappings")
INPLACE = {name: name for name in OUTPUTS[:4]}
DECISION_MARGIN = None
PAD_SLOT_ID = -1


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    groups = len(w.table_widths)
    tables = [
        randint(g, 0, w.id_pool, (w.requests, width), device, torch.int32)
        for width in w.table_widths
    ]
    num_blocks = torch.zeros((groups, w.requests), device=device, dtype=torch.int32)
    write_requests = torch.cat(
        [randperm(g, w.requests, device), randperm(g, w.requests, device)]
    ).to(torch.int32)
    writes = write_requests.numel()
    overwrite = rand(g, (writes,), torch.float32, device) < 0.5
    staged_counts = randint(g, 0, w.stage_capacity + 1, (groups, writes), device, torch.int32)
    ids = randint(g, 0, w.id_pool, (groups, writes, w.stage_capacity), device, torch.int32)
    filled = torch.arange(w.stage_capacity, device=device) < staged_counts.unsqueeze(-1)
    staged_ids = torch.where(filled, ids, torch.full_like(ids, -1))
    idx_mapping = randperm(g, w.requests, device).to(torch.int32)
    per_request = w.max_tokens // w.requests
    lengths = randint(g, 0, per_request + 1, (w.requests,), device)
    bounds = torch.cumsum(lengths, 0).clamp(max=w.max_tokens)
    query_start_loc = torch.cat([bounds.new_zeros(1), bounds]).to(torch.int32)
    max_position = 2 * w.stage_capacity * min(w.block_sizes)
    positions = randint(g, 0, max_position, (w.max_tokens,), device)
    return [*tables, num_blocks, write_requests, overwrite, staged_ids, staged_counts,
            idx_mapping, query_start_loc, positions]


def _apply_writes(tables, num_blocks, write_requests, overwrite, staged_ids, staged_counts,
                  expand: bool = True) -> None:
    """Apply the staged writes in order (small control tensors read once on the host)."""
    requests = write_requests.tolist()
    flags = overwrite.tolist()
    counts = staged_counts.tolist()
    for group, table in enumerate(tables):
        e = WORKLOAD["block_sizes"][group] // WORKLOAD["kernel_block_sizes"][group]
        e = e if expand else 1
        offsets = torch.arange(e, device=table.device, dtype=table.dtype)
        for i, r in enumerate(requests):
            n = counts[group][i]
            ids = (staged_ids[group, i, :n].unsqueeze(-1) * e + offsets).reshape(-1)
            start = 0 if flags[i] else int(num_blocks[group, r])
            table[r, start : start + ids.numel()] = ids
            num_blocks[group, r] = start + ids.numel()


def _slot_mappings(tables, idx_mapping, query_start_loc, positions) -> torch.Tensor:
    max_tokens = positions.numel()
    out = torch.full((len(tables), max_tokens), PAD_SLOT_ID, device=positions.device,
                     dtype=torch.int64)
    lens = (query_start_loc[1:] - query_start_loc[:-1]).long()
    used = int(query_start_loc[-1])
    request = torch.repeat_interleave(idx_mapping.long(), lens)
    pos = positions[:used].long()
    for group, table in enumerate(tables):
        k = WORKLOAD["kernel_block_sizes"][group]
        out[group, :used] = table[request, pos // k].long() * k + pos % k
    return out


def reference(block_table_0, block_table_1, block_table_2, num_blocks, write_requests,
              overwrite, staged_ids, staged_counts, idx_mapping, query_start_loc, positions):
    tables = [block_table_0, block_table_1, block_table_2]
    _apply_writes(tables, num_blocks, write_requests, overwrite, staged_ids, staged_counts)
    slots = _slot_mappings(tables, idx_mapping, query_start_loc, positions)
    return block_table_0, block_table_1, block_table_2, num_blocks, slots


def dropped_term(block_table_0, block_table_1, block_table_2, num_blocks, write_requests,
                 overwrite, staged_ids, staged_counts, idx_mapping, query_start_loc, positions):
    """Mutant: forgets to expand group 1's ids into kernel-sized blocks."""
    tables = [block_table_0, block_table_1, block_table_2]
    _apply_writes(tables, num_blocks, write_requests, overwrite, staged_ids, staged_counts,
                  expand=False)
    slots = _slot_mappings(tables, idx_mapping, query_start_loc, positions)
    return block_table_0, block_table_1, block_table_2, num_blocks, slots


def reordered(block_table_0, block_table_1, block_table_2, num_blocks, write_requests,
              overwrite, staged_ids, staged_counts, idx_mapping, query_start_loc, positions):
    """Valid alternative: writes applied request by request (each request's writes keep their
    order), slot mapping computed one batch entry at a time."""
    tables = [block_table_0, block_table_1, block_table_2]
    requests = write_requests.tolist()
    for r in sorted(set(requests)):
        for i in (i for i, x in enumerate(requests) if x == r):
            for group, table in enumerate(tables):
                e = WORKLOAD["block_sizes"][group] // WORKLOAD["kernel_block_sizes"][group]
                n = int(staged_counts[group, i])
                ids = torch.stack([staged_ids[group, i, :n] * e + j for j in range(e)], dim=1)
                start = 0 if bool(overwrite[i]) else int(num_blocks[group, r])
                table[r, start : start + n * e] = ids.reshape(-1)
                num_blocks[group, r] = start + n * e
    slots = torch.full((3, positions.numel()), PAD_SLOT_ID, dtype=torch.int64,
                       device=positions.device)
    for j in range(idx_mapping.numel()):
        lo, hi = int(query_start_loc[j]), int(query_start_loc[j + 1])
        p = positions[lo:hi]
        for group, table in enumerate(tables):
            k = WORKLOAD["kernel_block_sizes"][group]
            slots[group, lo:hi] = table[int(idx_mapping[j])][p // k].long() * k + p % k
    return block_table_0, block_table_1, block_table_2, num_blocks, slots


def cost(w: Workload) -> Cost:
    groups = len(w.table_widths)
    writes = 2 * w.requests
    staged = groups * writes * (w.stage_capacity + 1) * 4 + writes * 5
    table_writes = sum(
        writes * (w.stage_capacity / 2) * (b // k) * 4
        for b, k in zip(w.block_sizes, w.kernel_block_sizes)
    )
    tokens = w.max_tokens
    read = staged + 8 * tokens + 8 * w.requests + groups * tokens * 4 + groups * w.requests * 4
    written = table_writes + groups * w.requests * 4 + groups * tokens * 8
    return Cost(flops={"int": float(4 * groups * tokens)}, bytes=float(read + written))
