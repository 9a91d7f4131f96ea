"""Where each reference solution's time goes, measured outside the grader.

    PYTHONPATH=. python3 benchmarks/solutions_profile.py OUT.jsonl [FILES...]
        [--device cuda|cpu] [--scale full|smoke] [--calls N]

For every solution (default: all ``problems/solutions/pNN_{cute,tirx}.py``) and for the
problem's eager reference, in this one plain process (no jail, no judge), on fresh inputs per
call as the grader draws them:

* host µs: from the call until ``solve`` returns (launch overhead, Python glue);
* end-to-end µs: from the call until a device-wide synchronize after it returns;
* device µs: the GPU kernels' own time per call (torch.profiler, CUPTI), summed;
* speedup: eager end-to-end median over the solution's; % of SOL: the problem's
  speed-of-light time (``problems.sol``) over the solution's end-to-end median.

This is the independent figure the grader's speedups are compared with (issue 16: within 5 %),
and the table of ``docs/solutions.md`` (issue 21). One JSON line per file.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import re
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
from problems.registry import get  # noqa: E402
from problems.sol import sol_estimate  # noqa: E402

SOLUTIONS = REPO / "problems" / "solutions"
NAME = re.compile(r"(p\d\d)_(cute|tirx)")


def load_solve(path: Path) -> Callable[..., Any]:
    """The ``solve`` of a submission file, imported as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"_profiled_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: cannot import")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.solve  # type: ignore[no-any-return]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_calls(
    fn: Callable[..., Any], make: Callable[[int], list[Any]], device: str, calls: int, seed0: int
) -> dict[str, float]:
    """Median host and end-to-end µs over ``calls`` calls, each on a fresh draw."""
    host, e2e = [], []
    for i in range(calls):
        inputs = make(seed0 + i)
        _sync(device)
        t0 = time.perf_counter()
        out = fn(*inputs)
        t1 = time.perf_counter()
        _sync(device)
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        e2e.append((t2 - t0) * 1e6)
        del out, inputs
    return {
        "host_us": round(statistics.median(host), 1),
        "e2e_us": round(statistics.median(e2e), 1),
        "e2e_min_us": round(min(e2e), 1),
    }


def device_us(fn: Callable[..., Any], make: Callable[[int], list[Any]], calls: int) -> float | None:
    """GPU time per call (CUPTI through torch.profiler), measured as the grader's runner does
    (``dsl_hooks.profiled_device_ms``: median of ``calls`` profiled calls on one draw); None
    without a GPU."""
    if not torch.cuda.is_available():
        return None
    inputs = make(10_000)
    ms = profiled_device_ms(lambda: fn(*inputs), calls)
    return None if ms is None else round(ms * 1e3, 1)


def profile_file(path: Path, device: str, scale: str, calls: int) -> dict[str, Any]:
    """The row for one solution: host, device and end-to-end µs for it and for eager."""
    m = NAME.match(path.name)
    if not m:
        raise SystemExit(f"{path}: name must start with pNN_cute or pNN_tirx")
    problem = get(m.group(1))
    solve = load_solve(path)
    reference = problem.reference

    def make(seed: int) -> list[Any]:
        return problem.make_inputs(seed, device=device, scale=scale)

    row: dict[str, Any] = {"file": path.name, "problem": problem.id, "dsl": m.group(2)}
    # first calls compile and warm caches; not measured
    for fn in (solve, reference):
        for seed in (1, 2):
            fn(*make(seed))
    _sync(device)
    row["eager"] = time_calls(reference, make, device, calls, 100)
    row["solution"] = time_calls(solve, make, device, calls, 100)
    row["eager"]["device_us"] = device_us(reference, make, min(calls, 3))
    row["solution"]["device_us"] = device_us(solve, make, min(calls, 3))
    sol = sol_estimate(problem.cost(scale)).seconds * 1e6
    row["sol_us"] = round(sol, 2)
    row["speedup"] = round(row["eager"]["e2e_us"] / row["solution"]["e2e_us"], 3)
    row["pct_sol"] = round(100.0 * sol / row["solution"]["e2e_us"], 1)
    return row


def default_files() -> list[Path]:
    return sorted(p for p in SOLUTIONS.glob("p[0-9][0-9]_*.py") if NAME.match(p.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="JSON lines file to write")
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--scale", default=None, help="full on cuda, smoke on cpu by default")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    scale = args.scale or ("full" if args.device == "cuda" else "smoke")
    files = [f.resolve() for f in args.files] or default_files()
    failures = 0
    with args.out.open("w") as out:
        for path in files:
            try:
                row = profile_file(path, args.device, scale, args.calls)
            except Exception as exc:  # noqa: BLE001 - recorded, the batch goes on
                row = {"file": path.name, "error": f"{type(exc).__name__}: {exc}"[:400]}
                failures += 1
            row.update(device=args.device, scale=scale, calls=args.calls)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
