"""GPU check of the judge's memory (docs/grading.md, "GPU memory of a grading"): one draw of a
problem (p51 by default) checked against its anchor on the GPU the new way (the draw on the
host, fresh device copies per reference run, chunked comparison) and the old way (draw, clone
and float64 copies on the device), with each peak (``torch.cuda.max_memory_allocated``),
whether both give the same figures, and the plan (``mkb problems memory``). With ``--anchor
host`` the new way runs the float64 anchor on the host (as a grading does where the card cannot
hold it: p34 and p45 on an 80 GB card), timed, and then once more on the device for the
figures' comparison (out of memory there is recorded, not fatal).

Usage: ``python benchmarks/judge_memory_gpu.py [PROBLEM] [--anchor device|host]``; prints
JSON and writes it to ``$OUT/PROBLEM_ANCHOR_judge_peak.json`` (or /tmp). Not run yet: no GPU
reached this branch.
"""

from __future__ import annotations

import argparse
import json
import os
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


def _check(problem: Any, anchor_device: str | None) -> tuple[dict[str, Any], list[Any]]:
    """One draw checked the new way, its anchor on ``anchor_device`` (None: the GPU)."""
    inputs, out, held = _draw(problem)
    start = time.monotonic()
    shapes = stand_ins(out)
    out, inputs = to_host(out), to_host(inputs)
    ok, _, checks = check_anchor(problem.reference, out, shapes, inputs, "cuda", anchor_device)
    torch.cuda.synchronize()
    row = {
        "ok": ok,
        "anchor": anchor_device or "cuda",
        "draw_gb": _gb(held),
        "peak_gb": _gb(torch.cuda.max_memory_allocated()),
        "s": round(time.monotonic() - start, 2),
        "host_cpus": len(os.sched_getaffinity(0)),
    }
    del out, inputs, shapes
    torch.cuda.empty_cache()
    return row, [c.as_dict() for c in checks]


def _old(problem: Any, figures: list[Any]) -> dict[str, Any]:
    inputs, out, held = _draw(problem)
    start = time.monotonic()
    try:
        v, z = reference_and_anchor(problem.reference, inputs)
        ok, _, checks = check_outputs(out, v, z)
        torch.cuda.synchronize()
        return {
            "ok": ok,
            "draw_gb": _gb(held),
            "peak_gb": _gb(torch.cuda.max_memory_allocated()),
            "s": round(time.monotonic() - start, 2),
            "same_figures": [c.as_dict() for c in checks] == figures,
        }
    except torch.OutOfMemoryError as exc:
        return {"out_of_memory": str(exc)[:300]}


def main(pid: str, anchor: str = "device") -> dict[str, Any]:
    problem = get(pid)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "problem": pid}
    result["new"], figures = _check(problem, "cpu" if anchor == "host" else None)
    if anchor == "host":
        try:
            row, device_figures = _check(problem, None)
            result["device_anchor"] = {**row, "same_figures": device_figures == figures}
        except torch.OutOfMemoryError as exc:
            result["device_anchor"] = {"out_of_memory": str(exc)[:300]}
    else:
        result["old"] = _old(problem, figures)
    capacity = float(torch.cuda.get_device_properties(0).total_memory)
    plan = memory_plan(problem, "full", capacity)
    result["plan"] = {
        "judge_gb": _gb(plan.judge_bytes),
        "runner_gb": _gb(plan.runner_bytes),
        "total_gb": _gb(plan.total_bytes),
        "anchor": plan.anchor,
        "host_gb": _gb(plan.host_bytes),
        "anchor_s_estimate": plan.anchor_s,
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("problem", nargs="?", default="p51")
    parser.add_argument("--anchor", choices=("device", "host"), default="device")
    args = parser.parse_args()
    report = main(args.problem, args.anchor)
    print(json.dumps(report, indent=1))
    name = f"{args.problem}_{args.anchor}_judge_peak.json"
    with open(os.path.join(os.environ.get("OUT", "/tmp"), name), "w") as fh:
        json.dump(report, fh, indent=1)
