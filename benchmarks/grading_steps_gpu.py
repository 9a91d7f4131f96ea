"""Where an evaluation's wall time goes, step by step, on a GPU (issue 16's overhead).

    PYTHONPATH=. python3 benchmarks/grading_steps_gpu.py OUT.jsonl [--wait-s 20] FILES...

Starts one warm local grader (as ``mkb run`` does), waits ``--wait-s`` so the next judge and
its runners are started ahead, then grades each file in turn (default: p28 CuTe twice, p72
TIRx and its in-kernel-gates variant), pausing ``--gap-s`` between them. One JSON line per
evaluation, written as soon as it is done: wall time, the judge's timed steps
(``timings_s``: phases and the steps between them) and, per side, the clock's medians
(judge, report of the outputs, gap to the runner's figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.gpu_validation import jobs  # noqa: E402
from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.backends.local import LocalBackend  # noqa: E402
from engine.grading.options import EvalConfig  # noqa: E402

S = REPO / "problems" / "solutions"
DEFAULT = [
    S / "p28_cute.py",
    S / "p28_cute.py",
    S / "p72_tirx.py",
    S / "variants" / "p72_tirx_eager_gates.py",
]
CLOCK_KEYS = (
    "judge_median_ms",
    "report_median_ms",
    "median_gap_ms",
    "real_call_gap_ms",
    "trip_gap_median_ms",
    "judge_floor_ms",
    "scored_by",
)


async def main(
    out: Path,
    files: list[Path],
    wait_s: float,
    gap_s: float,
    device: str = "cuda",
    stage_warmup_ms: float = 0.0,
    call_trace: bool = False,
    warm_calls: bool = False,
) -> int:
    config = EvalConfig(
        stage_warmup_ms=stage_warmup_ms, call_trace=call_trace, warm_calls=warm_calls
    )
    backend = LocalBackend(gpus="auto" if device == "cuda" else None, config=config)
    start = time.perf_counter()
    await backend.start()
    with out.open("a") as sink:
        sink.write(json.dumps({"warm_parent_start_s": round(time.perf_counter() - start, 2)}))
        sink.write("\n")
        sink.flush()
        await asyncio.sleep(wait_s)
        for problem, dsl, path, _ in jobs([str(f) for f in files]):
            start = time.perf_counter()
            fb = await backend.grade(GradeRequest(problem, dsl, path.read_text(), device=device))
            clock = fb.clock or {}
            row = {
                "file": path.name,
                "verdict": fb.verdict,
                "reason": fb.reason,
                "speedup": fb.speedup,
                "wall_s": round(time.perf_counter() - start, 3),
                "timings_s": fb.timings_s,
                "submission": {k: (clock.get("submission") or {}).get(k) for k in CLOCK_KEYS},
                "eager": {k: (clock.get("eager") or {}).get(k) for k in CLOCK_KEYS},
                "started_ahead": clock.get("judge_started_ahead"),
                "stage_warmup_ms": stage_warmup_ms,
                "warm_calls": clock.get("warm_calls"),
                "breakdown": clock.get("breakdown"),
                "call_trace": clock.get("call_trace"),
            }
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(json.dumps(row), flush=True)
            await asyncio.sleep(gap_s)
    await backend.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--wait-s", type=float, default=20.0)
    parser.add_argument("--gap-s", type=float, default=3.0)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument(
        "--stage-warmup-ms", type=float, default=0.0, help="EvalConfig.stage_warmup_ms (A/B)"
    )
    parser.add_argument(
        "--call-trace", action="store_true", help="record EvalConfig.call_trace's rows"
    )
    parser.add_argument("--warm-calls", action="store_true", help="EvalConfig.warm_calls (A/B)")
    args = parser.parse_intermixed_args()
    files = args.files or DEFAULT
    sys.exit(
        asyncio.run(
            main(
                args.out,
                files,
                args.wait_s,
                args.gap_s,
                args.device,
                args.stage_warmup_ms,
                args.call_trace,
                args.warm_calls,
            )
        )
    )
