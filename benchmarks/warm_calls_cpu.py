"""What a cold cache costs a small call, and what a warm call buys back (no GPU needed).

    PYTHONPATH=. python3 benchmarks/warm_calls_cpu.py OUT.jsonl [--rounds 3] [--gradings 3]

Part 1, one plain process, one thread: p36's RMSNorm in PyTorch (the reference's arithmetic)
on the smoke workload, 60 calls on fresh inputs per mode, the first 10 dropped, median µs.
Before each timed call: nothing (a tight loop), a 2 ms sleep, a 64 MB sweep over memory (what
the judge's checks and input drawing do to the caches between two graded calls), or the sweep
and then one untimed call on the previous inputs (what ``EvalConfig.warm_calls`` does). The
modes alternate, ``--rounds`` times.

Part 2, the grader in CPU preview: the same PyTorch code as a submission, graded in a fresh
child (``grade_in_subprocess``, jailed as ``mkb grade`` does) without and with warm calls,
alternating, ``--gradings`` times each; the runners' median host time per call for the
submission and the eager reference (``clock.breakdown``). One JSON line per reading, then a
summary line per mode.
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

from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.options import EvalConfig  # noqa: E402
from engine.grading.parent.evaluate import grade_in_subprocess  # noqa: E402
from problems.registry import get  # noqa: E402

SUBMISSION = """import torch


def solve(hidden_states, weight):
    x = hidden_states.float()
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    return (x * inv * weight.float()).to(hidden_states.dtype)
"""
CALLS, DROPPED = 60, 10
SWEEP_BYTES = 64 * 1024 * 1024
MODES = ("tight loop", "2 ms sleep", "64 MB sweep", "sweep, then a warm call")


def _load_submission() -> Callable[..., Any]:
    """``solve`` of :data:`SUBMISSION`: the plain process runs the very code that is graded."""
    namespace: dict[str, Any] = {}
    exec(compile(SUBMISSION, "submission", "exec"), namespace)
    return namespace["solve"]  # type: ignore[no-any-return]


solve = _load_submission()


def plain_median_us(mode: str, make: Callable[[int], list[Any]], sweep: torch.Tensor) -> float:
    """Median µs of the timed calls in one mode (fresh inputs per call)."""
    samples = []
    previous = make(0)
    for i in range(CALLS):
        inputs = make(1 + i)
        if mode == "2 ms sleep":
            time.sleep(0.002)
        elif mode != "tight loop":
            sweep.add_(1.0)
            if mode == "sweep, then a warm call":
                solve(*previous)
        start = time.perf_counter()
        solve(*inputs)
        samples.append((time.perf_counter() - start) * 1e6)
        previous = inputs
    return statistics.median(samples[DROPPED:])


def graded_host_us(warm: bool) -> dict[str, Any]:
    request = GradeRequest("p36", "cute", SUBMISSION, device="cpu", request_id="warm-calls")
    fb = grade_in_subprocess(request, EvalConfig(warm_calls=warm), "cpu")
    split = (fb.clock or {}).get("breakdown") or {}
    return {
        "part": "grader",
        "warm_calls": warm,
        "verdict": fb.verdict,
        "submission_host_us": round(1e3 * ((split.get("submission") or {}).get("host_ms") or 0), 1),
        "eager_host_us": round(1e3 * ((split.get("eager") or {}).get("host_ms") or 0), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gradings", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    problem = get("p36")

    def make(seed: int) -> list[Any]:
        return problem.make_inputs(seed, device="cpu", scale="smoke")

    sweep = torch.empty(SWEEP_BYTES // 4)
    rows: list[dict[str, Any]] = []
    with args.out.open("w") as sink:

        def emit(row: dict[str, Any]) -> None:
            rows.append(row)
            sink.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)

        for round_ in range(args.rounds):
            for mode in MODES:
                us = plain_median_us(mode, make, sweep)
                emit({"part": "plain", "round": round_, "mode": mode, "median_us": round(us, 1)})
        for _ in range(args.gradings):
            for warm in (False, True):
                emit(graded_host_us(warm))
        for mode in MODES:
            values = [r["median_us"] for r in rows if r.get("mode") == mode]
            emit({"summary": f"plain, {mode}", "median_us_range": [min(values), max(values)]})
        for warm in (False, True):
            graded = [r for r in rows if r.get("part") == "grader" and r["warm_calls"] is warm]
            emit(
                {
                    "summary": f"grader, warm calls {'on' if warm else 'off'}",
                    "submission_host_us": [r["submission_host_us"] for r in graded],
                    "eager_host_us": [r["eager_host_us"] for r in graded],
                }
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
