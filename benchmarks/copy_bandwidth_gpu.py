"""What HBM bandwidth a plain copy reaches on this GPU, beside the memory-bound solutions.

    PYTHONPATH=. python3 benchmarks/copy_bandwidth_gpu.py OUT.json [--mb 133] [--calls 10]

Issue 21 asks p28 and p36 for 70 % of their speed of light end to end. p36's kernels run at
~85 % of the H200's 4.8 TB/s (one read and one write of 133 MB), p28's at ~89.5 % (two reads,
one write). Whether 85 % is the ceiling of a 1:1 read/write stream on this part or a kernel's
shortfall is what this measures: PyTorch's own device-to-device ``copy_`` (1:1), a 1:1
elementwise kernel (``neg``), a read-only ``sum``, a write-only ``fill_`` and plain TIRx copy
kernels written the way p36's kernel is (16-byte ``uint4`` loads and stores, 256-thread CTAs,
``V`` vectors per thread, all loads issued before the stores), each timed by the profiler's
device events (the runner's own reader, ``dsl_hooks.profiled_device_ms``), as GB/s and % of
the peak, and end to end (call to device-wide synchronize, launch cost included, as
``solutions_profile.py`` times a solution's % of SOL). Needs a GPU (the TIRx kernels need TVM;
without it their rows are skipped).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from engine.grading.runner.dsl_hooks import profiled_device_ms  # noqa: E402

PEAK_GBS = 4800.0  # H200 HBM3e
THREADS = 256
LANES = 8  # bf16 per 16-byte vector


def tirx_copy(vectors: int) -> Callable[[Any, Any], None] | None:
    """A TIRx kernel copying an ``(n, 8)`` bf16 tensor, ``vectors`` 16-byte vectors per thread
    (consecutive threads take consecutive vectors, so a warp covers 512 contiguous bytes per
    step); None without TVM."""
    try:
        import tvm
        from tvm.script import tirx as T
    except ImportError:
        return None
    per_cta = THREADS * vectors

    @T.prim_func
    def copy(x_ptr: T.handle, y_ptr: T.handle):
        n = T.int32()
        X = T.match_buffer(x_ptr, (n, LANES), "bfloat16")
        Y = T.match_buffer(y_ptr, (n, LANES), "bfloat16")
        T.device_entry()
        cta = T.cta_id([T.ceildiv(n, per_cta)])
        tx = T.thread_id([THREADS])
        v = T.alloc_local((vectors * LANES,), "bfloat16")
        for j in T.unroll(vectors):
            for i in T.vectorized(LANES):
                v[j * LANES + i] = X[T.min(cta * per_cta + j * THREADS + tx, n - 1), i]
        for j in T.unroll(vectors):
            if cta * per_cta + j * THREADS + tx < n:
                for i in T.vectorized(LANES):
                    Y[cta * per_cta + j * THREADS + tx, i] = v[j * LANES + i]

    major, minor = torch.cuda.get_device_capability()
    target = {"kind": "cuda", "arch": f"sm_{major}{minor}{'a' if major >= 9 else ''}"}
    exe = tvm.compile(
        tvm.IRModule({"main": copy}), target=tvm.target.Target(target), tir_pipeline="tirx"
    )
    fn = exe["main"]
    return lambda src, dst: fn(src.view(-1, LANES), dst.view(-1, LANES))


def e2e_us(call: Callable[[], Any], calls: int) -> float:
    """Median over ``calls`` of the time from the call until a device-wide synchronize after it
    (as ``solutions_profile.py`` times a solution: launch cost and sync included)."""
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--mb", type=float, default=133.0, help="bytes read (and written), MB")
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    n = int(args.mb * 1e6) // 2 // LANES * LANES
    src = torch.randn(n, device="cuda").to(torch.bfloat16)
    dst = torch.empty_like(src)
    nbytes = src.numel() * src.element_size()
    cases = {
        "copy (read + write)": (lambda: dst.copy_(src), 2 * nbytes),
        "sum (read)": (lambda: src.sum(dtype=torch.float32), nbytes),
        "fill (write)": (lambda: dst.fill_(1.0), nbytes),
        "neg (elementwise read + write)": (lambda: torch.neg(src, out=dst), 2 * nbytes),
    }
    for vectors in (1, 2, 4, 8):
        kernel = tirx_copy(vectors)
        if kernel is not None:
            cases[f"tirx copy, {vectors} x 16 B per thread"] = (
                lambda k=kernel: k(src, dst),
                2 * nbytes,
            )
    rows = []
    for name, (call, moved) in cases.items():
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        if name.startswith("tirx"):
            dst.zero_()
            call()
            if not torch.equal(dst, src):
                print(json.dumps({"case": name, "error": "copy differs"}), flush=True)
                continue
        ms = profiled_device_ms(call, args.calls)  # the runner's own device-time reader
        us = None if ms is None else ms * 1e3
        whole = e2e_us(call, args.calls)
        gbs = None if not us else moved / (us * 1e-6) / 1e9
        rows.append(
            {
                "case": name,
                "bytes": moved,
                "device_us": None if us is None else round(us, 2),
                "gb_s": None if gbs is None else round(gbs, 1),
                "pct_of_peak": None if gbs is None else round(100 * gbs / PEAK_GBS, 1),
                "e2e_us": round(whole, 2),
                "e2e_pct_of_peak": round(100 * moved / (whole * 1e-6) / 1e9 / PEAK_GBS, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
