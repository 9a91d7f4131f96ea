"""The runner's two profilers side by side on a GPU: CUPTI's records through ctypes and
``torch.profiler`` (``engine/grading/runner/cupti_activity.py``, ``dsl_hooks.PROFILER``).

    PYTHONPATH=. python3 benchmarks/profiler_compare_gpu.py [--solution FILE] [--out FILE]

Each profiler runs in a fresh process, as a runner would: the first profiled region's cost
(what a runner pays before it is ready), the kernels and device times of one call of a
reference solution plus a PyTorch reduction, the device time per call as the breakdown
reports it, and the host time of the call afterwards (does a started profiler slow launches?).
One JSON line per profiler. Without a GPU each line says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "problems" / "solutions" / "p28_cute.py"

CHILD = r"""
import importlib.util, json, statistics, sys, time
start = time.perf_counter()
import torch
steps = {"import_torch": time.perf_counter() - start}
if not torch.cuda.is_available():
    print(json.dumps({"error": "no CUDA"})); sys.exit(0)
from engine.grading.runner import dsl_hooks
from problems.registry import get
t = time.perf_counter(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
steps["cuda_context"] = time.perf_counter() - t
t = time.perf_counter(); warmed = dsl_hooks.warm_profiler()
steps["first_region"] = time.perf_counter() - t
path, problem_id = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("solution", path)
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
inputs = get(problem_id).make_inputs(7, "cuda", "full")
module.solve(*inputs); torch.cuda.synchronize()
def call():
    out = module.solve(*inputs)
    inputs[0].float().sum()  # a PyTorch reduction beside the DSL kernel
    return out
seen = dsl_hooks.profiled_kernel_names(call)
device_ms = dsl_hooks.profiled_device_ms(lambda: module.solve(*inputs))
hosts = []
for _ in range(60):
    torch.cuda.synchronize(); t = time.perf_counter(); module.solve(*inputs)
    hosts.append((time.perf_counter() - t) * 1e6)
torch.cuda.synchronize()
names, durations, control = seen if seen else ([], [], False)
print(json.dumps({
    "backend": dsl_hooks.profiler_backend(), "warmed": warmed,
    "steps_s": {k: round(v, 4) for k, v in steps.items()},
    "events": [[n[:120], round(d, 3)] for n, d in zip(names, durations)],
    "control_seen": control, "device_ms": device_ms,
    "host_us_median": round(statistics.median(hosts[10:]), 2),
}))
"""


def run(profiler: str, solution: Path, problem_id: str, timeout_s: float) -> dict:
    env = {**os.environ, "MKB_PROFILER": profiler, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(solution), problem_id],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return {"profiler": profiler, "error": f"timeout after {timeout_s} s"}
    lines = done.stdout.strip().splitlines()
    try:
        row = json.loads(lines[-1])
    except (IndexError, ValueError):
        row = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return {"profiler": profiler, **row}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solution", type=Path, default=DEFAULT)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    problem_id = args.solution.name[:3]
    for profiler in ("cupti", "torch"):
        row = run(profiler, args.solution, problem_id, args.timeout)
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as sink:
                sink.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
