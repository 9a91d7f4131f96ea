"""GPU check of the judge's memory (docs/grading.md, "GPU memory of a grading"): one draw of a
problem (p51 by default) checked against its anchor on the GPU the new way (the draw on the
host, fresh device copies per reference run, chunked comparison) and the old way (draw, clone
and float64 copies on the device), with each peak (``torch.cuda.max_memory_allocated``),
whether both give the same figures, and the plan (``mkb problems memory``).

Usage: ``python benchmarks/judge_memory_gpu.py [PROBLEM]``; prints JSON and writes it to
``$OUT/PROBLEM_judge_peak.json`` (or /tmp). Not run yet: no GPU reached this branch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch

from engine.grading.judge.anchor import check_anchor, stand_ins, to_host
from problems.compare import check_outputs, clone_inputs, reference_and_anchor, reference_numerics
from problems.memory import memory_plan
from problems.registry import get


def _gb(x: float | None) -> float | None:
    return None if x is None else round(x / 1e9, 2)


def _draw(problem: Any) -> tuple[list[Any], Any, float]:
    """A draw on the GPU and a correct output of it; the bytes they hold; peaks reset."""
    inputs = problem.make_inputs(0, "cuda", "full")
    with reference_numerics():
        out = problem.reference(*clone_inputs(inputs))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return inputs, out, torch.cuda.memory_allocated()


def main(pid: str) -> dict[str, Any]:
    problem = get(pid)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "problem": pid}
    inputs, out, held = _draw(problem)
    start = time.monotonic()
    shapes = stand_ins(out)
    out, inputs = to_host(out), to_host(inputs)
    ok, _, checks = check_anchor(problem.reference, out, shapes, inputs, "cuda")
    torch.cuda.synchronize()
    result["new"] = {
        "ok": ok,
        "draw_gb": _gb(held),
        "peak_gb": _gb(torch.cuda.max_memory_allocated()),
        "s": round(time.monotonic() - start, 2),
    }
    figures = [c.as_dict() for c in checks]
    del out, inputs, shapes
    torch.cuda.empty_cache()
    inputs, out, held = _draw(problem)
    start = time.monotonic()
    try:
        v, z = reference_and_anchor(problem.reference, inputs)
        ok, _, checks = check_outputs(out, v, z)
        torch.cuda.synchronize()
        result["old"] = {
            "ok": ok,
            "draw_gb": _gb(held),
            "peak_gb": _gb(torch.cuda.max_memory_allocated()),
            "s": round(time.monotonic() - start, 2),
            "same_figures": [c.as_dict() for c in checks] == figures,
        }
    except torch.OutOfMemoryError as exc:
        result["old"] = {"out_of_memory": str(exc)[:300]}
    plan = memory_plan(problem, "full")
    result["plan"] = {
        "judge_gb": _gb(plan.judge_bytes),
        "runner_gb": _gb(plan.runner_bytes),
        "total_gb": _gb(plan.total_bytes),
    }
    return result


if __name__ == "__main__":
    problem_id = sys.argv[1] if len(sys.argv) > 1 else "p51"
    report = main(problem_id)
    print(json.dumps(report, indent=1))
    path = os.path.join(os.environ.get("OUT", "/tmp"), f"{problem_id}_judge_peak.json")
    with open(path, "w") as fh:
        json.dump(report, fh, indent=1)
