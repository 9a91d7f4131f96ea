"""Why small calls score lower in the grader than in a plain loop (issue 16, small-call Δ).

    PYTHONPATH=. python3 benchmarks/call_cadence_gpu.py OUT.jsonl [FILES...] [--calls N]

In one plain process (no jail, no judge), each solution is timed as ``solutions_profile.py``
times it (host µs until ``solve`` returns, end-to-end µs after a device-wide synchronize),
then again with one of the grader runner's habits added at a time:

* ``set_``: inputs rebuilt as the runner builds them (``set_`` onto a uint8 device buffer);
* ``hooks``: the DSL launch hooks installed (``dsl_hooks.install``);
* ``switch``: the runner's tiny switch kernel and a synchronize just before the call;
* ``blocked``: the process sleeps 2 ms before the call, as a runner waits on its socket;
* ``blocked+spinXms``: the same sleep, then X ms of busy polling before the call (0.2 ms: a
  grader runner woken by ``stage``; 1 and 5 ms: a warm-up spin a runner could add);
* ``all``: every habit above at once;
* after ``dsl_hooks.warm_profiler()`` (CUPTI started, as the runner now does at start):
  ``plain+cupti`` and ``all+cupti``.

One JSON line per file with the medians per mode. Needs a GPU.
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

from benchmarks.solutions_profile import NAME, load_solve  # noqa: E402
from engine.grading.runner import dsl_hooks  # noqa: E402
from problems.registry import get  # noqa: E402

S = REPO / "problems" / "solutions"
DEFAULT = [
    S / "p36_cute.py",
    S / "p36_tirx.py",
    S / "p28_cute.py",
    S / "variants" / "p72_tirx_eager_gates.py",
]
DRAWS = 6


def as_runner_builds(t: Any) -> Any:
    """The tensor rebuilt as the runner builds staged inputs: ``set_`` onto a byte buffer."""
    if not isinstance(t, torch.Tensor):
        return t
    raw = torch.empty(max(1, t.untyped_storage().nbytes()), dtype=torch.uint8, device=t.device)
    out = torch.empty(0, dtype=t.dtype, device=t.device).set_(
        raw.untyped_storage(), 0, t.shape, t.stride()
    )
    out.copy_(t)
    return out


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(
    solve: Callable[..., Any],
    draws: list[list[Any]],
    calls: int,
    *,
    switch: bool,
    blocked: bool,
    spin_after_s: float = 0.0,
) -> dict[str, float]:
    """Median host and end-to-end µs; ``blocked`` sleeps 2 ms before each call, then
    ``spin_after_s`` of busy polling (0.2 ms is what a grader's runner has between being woken
    by ``stage`` and the ``call``; longer is a warm-up spin a runner could do)."""
    marker = torch.zeros(1, device="cuda")
    host, e2e = [], []
    for i in range(calls):
        inputs = draws[i % len(draws)]
        if switch:
            marker.add_(1.0)
        torch.cuda.synchronize()
        if blocked:
            time.sleep(0.002)
        if spin_after_s:
            _spin(spin_after_s)
        t0 = time.perf_counter()
        out = solve(*inputs)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        e2e.append((t2 - t0) * 1e6)
        del out
    return {
        "host_us": round(statistics.median(host), 1),
        "e2e_us": round(statistics.median(e2e), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    prepared = []
    for path in args.files or DEFAULT:
        match = NAME.search(path.name)
        assert match, path
        problem = get(match.group(1))
        draws = [problem.make_inputs(1000 + i, "cuda", "full") for i in range(DRAWS)]
        rebuilt = [[as_runner_builds(t) for t in d] for d in draws]
        solve = load_solve(path)
        for d in draws:
            solve(*d)  # compile and load outside the measurement
        torch.cuda.synchronize()
        prepared.append((path, match.group(2), solve, draws, rebuilt))
    results: dict[str, dict[str, Any]] = {p.name: {} for p, *_ in prepared}
    for path, dsl, solve, draws, rebuilt in prepared:  # before the profiler ever ran
        modes = results[path.name]
        modes["plain"] = measure(solve, draws, args.calls, switch=False, blocked=False)
        modes["set_"] = measure(solve, rebuilt, args.calls, switch=False, blocked=False)
        modes["switch"] = measure(solve, draws, args.calls, switch=True, blocked=False)
        modes["blocked"] = measure(solve, draws, args.calls, switch=False, blocked=True)
        for spin_ms in (0.2, 1.0, 5.0):  # woken, then a warm-up spin before the call
            modes[f"blocked+spin{spin_ms:g}ms"] = measure(
                solve, draws, args.calls, switch=False, blocked=True, spin_after_s=spin_ms / 1e3
            )
        counter = dsl_hooks.install(dsl)
        modes["hooks"] = measure(solve, draws, args.calls, switch=False, blocked=False)
        modes["all"] = measure(solve, rebuilt, args.calls, switch=True, blocked=True)
        if counter is not None:
            counter.uninstall()
    warmed = dsl_hooks.warm_profiler()
    for path, dsl, solve, draws, rebuilt in prepared:
        modes = results[path.name]
        modes["plain+cupti"] = measure(solve, draws, args.calls, switch=False, blocked=False)
        counter = dsl_hooks.install(dsl)
        modes["all+cupti"] = measure(solve, rebuilt, args.calls, switch=True, blocked=True)
        if counter is not None:
            counter.uninstall()
        row = {"file": path.name, "profiler_warmed": warmed, "modes": modes}
        with args.out.open("a") as sink:
            sink.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
