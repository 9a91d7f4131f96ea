"""One solution timed in a plain process, the way the grader's runner times it, with no judge,
no jail and no socket: the baseline the grading path is measured against.

    PYTHONPATH=. python3 benchmarks/plain_timing.py FILE [--device cuda|cpu] [--calls 50]

One fresh process prints one JSON line. For the solution and for the eager reference (under
the reference numerics), after two warm-up calls, each of ``--calls`` calls on fresh draws is
timed as the runner times it (a tiny kernel and a device synchronize first, then
``perf_counter`` around the call and a device-wide synchronize; ``host`` until the call
returns, before the sync), and the kernels' own time is read from CUPTI (median of 3 profiled
calls, GPU only) after every timing, since CUPTI once attached slows later launches. The
solution is timed twice: without, then with the grader's DSL launch hooks installed
(``hooks``), so the hooks' share of the runner's host time is seen apart.
"""

from __future__ import annotations

import argparse
import contextlib
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

FILE_NAME = re.compile(r"(p\d\d)_(cute|tirx)")


def time_calls(
    fn: Callable[..., Any], make: Callable[[int], list[Any]], calls: int, cuda: bool
) -> dict[str, float]:
    """Median end-to-end and host microseconds of ``calls`` calls on fresh draws."""
    import torch

    switch = torch.zeros(1, device="cuda") if cuda else None
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock = time.perf_counter
    e2e: list[float] = []
    host: list[float] = []
    for i in range(calls):
        inputs = make(1000 + i)
        if switch is not None:
            switch.add_(1.0)
        sync()
        t0 = clock()
        out = fn(*inputs)
        t1 = clock()
        sync()
        t2 = clock()
        host.append((t1 - t0) * 1e6)
        e2e.append((t2 - t0) * 1e6)
        del out, inputs
    return {
        "e2e_us": round(statistics.median(e2e), 3),
        "host_us": round(statistics.median(host), 3),
    }


def device_us(fn: Callable[..., Any], make: Callable[[int], list[Any]], cuda: bool) -> float | None:
    if not cuda:
        return None
    from engine.grading.runner.dsl_hooks import profiled_device_ms

    inputs = make(9)
    ms = profiled_device_ms(lambda: fn(*inputs), 3)
    return None if ms is None else round(ms * 1e3, 3)


def measure(path: Path, device: str, calls: int) -> dict[str, Any]:
    from problems.compare import reference_numerics
    from problems.registry import get

    match = FILE_NAME.match(path.name)
    if match is None:
        raise SystemExit(f"{path}: the name must start with pNN_cute or pNN_tirx")
    problem, dsl = get(match.group(1)), match.group(2)
    cuda = device == "cuda"
    scale = "full" if cuda else "smoke"
    if not cuda:
        import torch

        torch.set_num_threads(1)  # as the runner does in CPU preview

    def make(seed: int) -> list[Any]:
        return problem.make_inputs(seed, device, scale)

    spec = importlib.util.spec_from_file_location("submission", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row: dict[str, Any] = {"file": path.name, "problem": problem.id, "dsl": dsl, "device": device}
    sides: list[tuple[str, Callable[..., Any], Any]] = [
        ("eager", problem.reference, reference_numerics),
        ("solution", module.solve, contextlib.nullcontext),
    ]
    # every timing first, then the profiler: CUPTI, once attached, slows every later launch
    # (benchmarks/host_overhead_gpu.py), so a figure taken after device_us is not plain
    for name, fn, numerics in sides:
        with numerics():
            for seed in (1, 2):
                fn(*make(seed))
            row[name] = time_calls(fn, make, calls, cuda)
    if cuda:
        from engine.grading.runner import dsl_hooks

        counter = dsl_hooks.install(dsl)
        row["hooks"] = time_calls(module.solve, make, calls, cuda) if counter else None
        if counter is not None:
            counter.uninstall()
    for name, fn, numerics in sides:
        with numerics():
            row[name]["device_us"] = device_us(fn, make, cuda)
    for key in ("e2e_us", "device_us"):
        eager, solution = row["eager"][key], row["solution"][key]
        row["speedup_" + key.split("_")[0]] = (
            round(eager / solution, 4) if eager and solution else None
        )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.file.resolve(), args.device, args.calls)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
