"""Each kernel's own device time inside one call of a solution (issue 21: the GEMM alone).

    PYTHONPATH=. python3 benchmarks/kernel_split_gpu.py OUT.jsonl [FILES...] [--calls 5]

In one plain process, each file's ``solve`` runs on full-scale inputs a few times (compiles,
warms), then ``--calls`` more times under the profiler (the runner's own reader,
``dsl_hooks.profiled_kernel_names``). One JSON line per file: per kernel (in launch order)
its name and median device µs. For p52 the line adds the GEMM's TFLOPS and its share of the
H200's 1,979 TFLOPS dense FP8 peak. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.solutions_profile import NAME, load_solve  # noqa: E402
from engine.grading.runner.dsl_hooks import profiled_kernel_names  # noqa: E402
from problems.registry import get  # noqa: E402

S = REPO / "problems" / "solutions"
DEFAULT = [S / "p52_cute.py", S / "p52_tirx.py"]
FP8_DENSE_PEAK_TFLOPS = 1979.0


def split(path: Path, calls: int) -> dict[str, Any]:
    match = NAME.match(path.name)
    if not match:
        raise SystemExit(f"{path}: name must start with pNN_cute or pNN_tirx")
    problem = get(match.group(1))
    solve = load_solve(path)
    inputs = [problem.make_inputs(seed, device="cuda", scale="full") for seed in range(2)]
    for i in range(3):
        solve(*inputs[i % 2])
    torch.cuda.synchronize()
    per_kernel: list[list[float]] = []
    names: list[str] = []
    for i in range(calls):
        seen = profiled_kernel_names(lambda i=i: solve(*inputs[i % 2]))
        if seen is None:
            return {"file": path.name, "error": "no profiler"}
        got_names, durations, _ = seen
        kernels = list(zip(got_names, durations, strict=True))[1:]  # the control comes first
        if not names:
            names = [n for n, _ in kernels]
            per_kernel = [[] for _ in kernels]
        for slot, (_, d) in zip(per_kernel, kernels, strict=False):
            slot.append(d)
    rows = [
        {"name": n[:120], "device_us": round(statistics.median(v), 1)}
        for n, v in zip(names, per_kernel, strict=True)
    ]
    out: dict[str, Any] = {"file": path.name, "kernels": rows}
    if match.group(1) == "p52" and rows:
        from problems.quantization.p52_attention_output_projection_qwen3vl_fp8 import WORKLOAD

        flops = 2.0 * WORKLOAD["tokens"] * WORKLOAD["in_features"] * WORKLOAD["out_features"]
        gemm = max(rows, key=lambda r: r["device_us"])
        tflops = flops / (gemm["device_us"] * 1e-6) / 1e12
        out.update(
            gemm_us=gemm["device_us"],
            gemm_tflops=round(tflops, 1),
            gemm_pct_of_peak=round(100 * tflops / FP8_DENSE_PEAK_TFLOPS, 1),
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    with args.out.open("a") as sink:
        for path in args.files or DEFAULT:
            try:
                row = split(path, args.calls)
            except Exception as exc:  # noqa: BLE001 - one file's failure is its own row
                row = {"file": path.name, "error": f"{type(exc).__name__}: {exc}"[:500]}
            sink.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
