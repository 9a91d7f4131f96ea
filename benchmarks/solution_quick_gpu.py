"""First run of a new solution on a GPU: is it right, and how fast, before the grader sees it.

    PYTHONPATH=. python3 benchmarks/solution_quick_gpu.py OUT.jsonl FILES... [--timeout-s 120]

Each file runs in its own child process under a time limit (a new kernel may hang: a wrong
barrier count waits forever), in a plain process (no jail, no judge):

1. smoke inputs, then full inputs (seed 1): ``solve`` against the problem's float64 anchor
   with the grader's own comparison (``problems.compare.check_outputs``): ok, the worst
   error and its allowance per output leaf;
2. at full scale: median end-to-end ms over 20 calls (device-wide synchronize), the eager
   reference's, the speedup, and the achieved FLOP/s of the problem's cost model per math type.

One JSON line per file (a child that timed out or died gets a line saying so). Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _check(problem: Any, solve: Any, scale: str, device: str) -> dict[str, Any]:
    from benchmarks.solutions_profile import _sync
    from problems.compare import check_outputs, clone_inputs, reference_and_anchor

    inputs = problem.make_inputs(1, device, scale)
    out = solve(*clone_inputs(inputs))
    _sync(device)
    v, z = reference_and_anchor(problem.reference, inputs)
    ok, structure, leaves = check_outputs(out, v, z)
    return {
        "ok": bool(ok),
        "structure": structure,
        "leaves": [c.as_dict() for c in leaves],
    }


def _time(fn: Any, inputs: list[Any], device: str, calls: int = 20) -> float:
    from benchmarks.solutions_profile import _sync

    for _ in range(3):
        fn(*inputs)
    samples = []
    for _ in range(calls):
        _sync(device)
        t0 = time.perf_counter()
        fn(*inputs)
        _sync(device)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def child(path: Path, device: str) -> dict[str, Any]:
    """Everything for one file (runs in the child)."""
    from benchmarks.solutions_profile import NAME, load_solve
    from problems.registry import get

    match = NAME.search(path.name)
    if not match:
        raise SystemExit(f"{path}: name must contain pNN_cute or pNN_tirx")
    problem = get(match.group(1))
    solve = load_solve(path)
    row: dict[str, Any] = {"file": path.name}
    start = time.perf_counter()
    row["smoke"] = _check(problem, solve, "smoke", device)
    if device == "cpu":  # a dry run of this script on a host without a GPU
        return row
    row["full"] = _check(problem, solve, "full", device)
    row["first_calls_s"] = round(time.perf_counter() - start, 2)
    inputs = problem.make_inputs(2, "cuda", "full")
    row["solution_ms"] = round(_time(solve, inputs, device), 4)
    row["eager_ms"] = round(_time(problem.reference, inputs, device, 5), 4)
    row["speedup"] = round(row["eager_ms"] / row["solution_ms"], 3)
    cost = problem.cost("full")
    row["tflops"] = {k: round(v / row["solution_ms"] / 1e9, 1) for k, v in cost.flops.items()}
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.files[0], args.device)))
        return 0
    for path in args.files:
        command = [sys.executable, __file__, str(args.out), str(path), "--child"]
        try:
            proc = subprocess.run(
                [*command, f"--device={args.device}"],
                capture_output=True,
                text=True,
                timeout=args.timeout_s,
            )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"file": path.name, "rc": proc.returncode}
            if not lines:
                row["stderr"] = proc.stderr[-1500:]
        except subprocess.TimeoutExpired:
            row = {"file": path.name, "timeout_s": args.timeout_s}
        with args.out.open("a") as sink:
            sink.write(json.dumps(row) + "\n")
        print(json.dumps(row)[:600], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
