"""Full-scale catalog run on a GPU: eager-reference median time and float64-anchor time.

For every problem: build the full workload on CUDA, run the float64 anchor once (timed), then
time the eager reference under reference numerics (1 warmup + N timed calls, CUDA events
after a device synchronize, fresh inputs per call generated outside the timed region), and
record peak GPU memory. One JSON object per problem is written to OUT (and printed).

    PYTHONPATH=. python3 benchmarks/catalog_full_scale.py --out catalog.json [--calls 5]
        [--budget-s 540] [IDS...]
    .venv/bin/python benchmarks/catalog_full_scale.py --render catalog.json > docs/catalog.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from problems.compare import promote, reference_numerics
from problems.registry import catalog


def _sync() -> None:
    torch.cuda.synchronize()


def time_problem(problem, calls: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    row: dict[str, object] = {"id": problem.id, "slug": problem.slug, "family": problem.family}
    t0 = time.perf_counter()
    inputs = problem.make_inputs(1, "cuda", "full")
    _sync()
    row["make_inputs_s"] = round(time.perf_counter() - t0, 3)
    row["inputs_gb"] = round(sum(x.numel() * x.element_size() for x in inputs
                                 if isinstance(x, torch.Tensor)) / 1e9, 3)
    with reference_numerics():
        promoted = promote(inputs)
        _sync()
        t0 = time.perf_counter()
        problem.reference(*promoted)
        _sync()
        row["anchor_s"] = round(time.perf_counter() - t0, 3)
        del promoted
        torch.cuda.empty_cache()
        samples = []
        for k in range(calls + 1):
            x = problem.make_inputs(1000 + k, "cuda", "full")
            _sync()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            problem.reference(*x)
            _sync()
            end.record()
            end.synchronize()
            if k:  # the first call is warmup
                samples.append(start.elapsed_time(end))
            del x
    row["eager_median_ms"] = round(statistics.median(samples), 4)
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    row["eager_iqr_ms"] = round(q[2] - q[0], 4)
    row["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    try:
        from problems.sol import sol_estimate

        sol = sol_estimate(problem.cost("full"))
        row["sol_ms"] = round(sol.seconds * 1e3, 5)
        row["sol_bound"] = sol.bound
    except Exception as exc:  # noqa: BLE001 - SOL is optional here
        row["sol_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return row


def render(path: str) -> str:
    """docs/catalog.md from a results file: one row per problem, in catalog order."""
    data = json.loads(Path(path).read_text())
    rows = {r["id"]: r for r in data["problems"]}
    lines = [
        "# Catalog: full-scale figures",
        "",
        f"Measured on {data['device']} (torch {data['torch']}) with",
        "`benchmarks/catalog_full_scale.py`: the full workload built on the GPU, the float64",
        "anchor run once, the eager reference timed end to end with CUDA events (1 warmup and",
        f"{data.get('calls', 3)} timed calls, fresh inputs each). SOL = max(FLOPs / peak, bytes /",
        "bandwidth) on H200 peaks (`problems/sol.py`); *eager / SOL* says how far eager PyTorch",
        "is from the bound. Raw results: `docs/gpu-runs/`.",
        "",
        "| id | problem | family | eager median (ms) | IQR (ms) | anchor (s) | peak GPU (GB) "
        "| SOL (ms) | eager / SOL | SOL B200 (ms) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    from problems.sol import B200, sol_estimate  # computed: no B200 measures these
    for problem in catalog():
        r = rows.get(problem.id, {})
        if "error" in r:
            lines.append(f"| {problem.id} | {problem.slug} | {problem.family} | "
                         f"not measured: {r['error'][:80]} | | | | | | |")
            continue
        ratio = (r["eager_median_ms"] / r["sol_ms"]) if r.get("sol_ms") else None
        lines.append(
            f"| {problem.id} | {problem.slug} | {problem.family} | {r.get('eager_median_ms', '')}"
            f" | {r.get('eager_iqr_ms', '')} | {r.get('anchor_s', '')} | "
            f"{r.get('peak_gpu_gb', '')} | {r.get('sol_ms', '')} | "
            f"{'' if ratio is None else f'{ratio:.1f}×'} | "
            f"{sol_estimate(problem.cost('full'), B200).seconds * 1e3:.5f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ids", nargs="*")
    parser.add_argument("--out")
    parser.add_argument("--render", metavar="RESULTS_JSON",
                        help="print docs/catalog.md from a results file and exit")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=540.0)
    args = parser.parse_args()
    if args.render:
        sys.stdout.write(render(args.render))
        return 0
    if not args.out:
        parser.error("--out is required")
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.budget_s
    rows = []
    out = Path(args.out)
    for problem in catalog().select(args.ids or None):
        if time.monotonic() > deadline:
            rows.append({"id": problem.id, "slug": problem.slug, "error": "not run: time budget"})
            continue
        t0 = time.perf_counter()
        try:
            row = time_problem(problem, args.calls)
        except Exception as exc:  # noqa: BLE001 - record and go on
            row = {"id": problem.id, "slug": problem.slug,
                   "error": f"{type(exc).__name__}: {exc}"[:300]}
            torch.cuda.empty_cache()
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
        out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch":
                                   torch.__version__, "calls": args.calls, "problems": rows},
                                  indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
