"""How long grading spends around a submission: static rules, cold vs warm workers, phases.

    PYTHONPATH=. python3 benchmarks/grading_overhead.py [--device auto|cpu|cuda] [--repeats 5]
    python3 benchmarks/grading_overhead.py --from-rows GRADING.jsonl --catalog CATALOG.json

Grades an honest plain-torch p28 submission (tests/grading/fixtures/honest/p28_plain.py)
with the DSL checks off (it launches no DSL kernel), so the figures are the harness's own
cost: the static check, a fresh ``python -m engine.grading.judge.job`` and runner per evaluation
(cold), a warm parent that forks a judge per evaluation and keeps runners started ahead
(warm), each phase inside the judge, and the timer floor (timing a call that does nothing).
CPU preview uses the smoke workload and fewer calls; on a GPU the full workload and the
contract's counts.

``--from-rows`` splits recorded evaluations (rows written by ``benchmarks/gpu_validation.py``)
instead: the unavoidable work is the submission's own kernel time (66 calls: 5 correctness
draws, 10 warmup, 50 timed, 1 bypass), the eager reference's (60 calls) and the float64
anchor's (5 draws, from ``benchmarks/catalog_full_scale.py``'s record); the rest of the
wall time is the harness's share (fork, CUDA context, input generation and checksums,
comparisons, JIT compilation on the first call). The residual outside every phase is the
fixed cost of a warm worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.backends.local import LocalBackend  # noqa: E402
from engine.grading.options import EvalConfig  # noqa: E402
from engine.grading.parent.evaluate import grade_in_subprocess, resolve_device  # noqa: E402
from engine.grading.rules.static import check_source  # noqa: E402

# timings that are not phases of their own: the child's total, and parts of a phase
NOT_PHASES = {
    "child_total",
    "eager_profile",
    "runner_wait",
    "correctness_first_call",
    "correctness_anchor",
    "timing_checks",
}
SUBMISSION = REPO / "tests" / "grading" / "fixtures" / "honest" / "p28_plain.py"


def static_rules_ms(source: str, repeats: int = 20) -> dict[str, float]:
    big = source + "\n" + "\n".join(f"x_{i} = {i} * 2  # filler" for i in range(9000))
    out = {}
    for label, text in (("typical", source), (f"{len(big.encode()) // 1024} kB", big)):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            check_source(text)
            times.append((time.perf_counter() - start) * 1e3)
        out[label] = statistics.median(times)
    return out


def timer_floor_ms(device: str, calls: int = 50) -> float:
    from engine.grading.judge.timing import CpuTimer, CudaTimer

    timer = CudaTimer() if device == "cuda" else CpuTimer()
    samples = [timer.time_call(lambda: None, ())[1] for _ in range(calls + 10)][10:]
    return statistics.median(samples)


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    phases: dict[str, list[float]] = {}
    for r in runs:
        for k, v in r["timings_s"].items():
            phases.setdefault(k, []).append(v)
    return {
        "verdicts": sorted({r["verdict"] for r in runs}),
        "wall_median_s": statistics.median(walls),
        "wall_min_s": min(walls),
        "phases_median_s": {k: round(statistics.median(v), 4) for k, v in phases.items()},
        "impl_median_ms": statistics.median(r["impl_ms"] for r in runs if r["impl_ms"]),
        "eager_median_ms": statistics.median(r["eager_ms"] for r in runs if r["eager_ms"]),
    }


def run_cold(request: GradeRequest, config: EvalConfig, device: str, n: int) -> dict[str, Any]:
    runs = []
    for _ in range(n):
        start = time.perf_counter()
        fb = grade_in_subprocess(request, config, device)
        runs.append(
            {
                "wall_s": time.perf_counter() - start,
                "verdict": fb.verdict,
                "timings_s": fb.timings_s,
                "impl_ms": fb.impl_median_ms,
                "eager_ms": fb.eager_median_ms,
            }
        )
    return summarize_runs(runs)


async def run_warm(
    request: GradeRequest, config: EvalConfig, device: str, n: int, gap_s: float = 0.0
) -> dict:
    """Evaluations through one warm parent: back to back, or ``gap_s`` apart (paced like an
    agent's submissions, so the next judge and runner are started ahead and waiting)."""
    backend = LocalBackend(gpus=[0] if device == "cuda" else None, config=config)
    start = time.perf_counter()
    await backend.start()
    startup = time.perf_counter() - start
    runs = []
    try:
        for _ in range(n):
            await asyncio.sleep(gap_s)
            start = time.perf_counter()
            fb = await backend.grade(request)
            runs.append(
                {
                    "wall_s": time.perf_counter() - start,
                    "verdict": fb.verdict,
                    "timings_s": fb.timings_s,
                    "impl_ms": fb.impl_median_ms,
                    "eager_ms": fb.eager_median_ms,
                }
            )
    finally:
        await backend.close()
    return {"warm_parent_start_s": startup, "gap_s": gap_s, **summarize_runs(runs)}


IMPL_CALLS = 5 + 10 + 50 + 1  # correctness draws, warmup, timed, bypass
EAGER_CALLS = 10 + 50  # warmup, timed
ANCHOR_DRAWS = 5


def split_recorded(rows: list[dict[str, Any]], catalog: dict[str, dict[str, Any]]) -> list[dict]:
    """Wall time of recorded evaluations split into unavoidable work and harness share."""
    out = []
    for row in rows:
        entry = catalog.get(row["problem"], {})
        impl_ms = row.get("impl_median_ms") or 0.0
        eager_ms = row.get("eager_median_ms") or entry.get("eager_median_ms") or 0.0
        anchor_s = entry.get("anchor_s") or 0.0
        unavoidable = (IMPL_CALLS * impl_ms + EAGER_CALLS * eager_ms) / 1e3
        unavoidable += ANCHOR_DRAWS * anchor_s
        phases = {
            k: v for k, v in (row.get("timings_s") or {}).items() if k not in NOT_PHASES
        }
        out.append(
            {
                "file": row["file"],
                "verdict": row["verdict"],
                "wall_s": row["wall_s"],
                "unavoidable_s": round(unavoidable, 3),
                "harness_s": round(row["wall_s"] - unavoidable, 3),
                "outside_phases_s": round(row["wall_s"] - sum(phases.values()), 3),
                "inputs_gb": entry.get("inputs_gb"),
            }
        )
    return out


def print_split(split: list[dict[str, Any]], target_s: float = 3.0) -> None:
    print("| submission | verdict | wall s | unavoidable s | harness s | outside phases s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in split:
        print(
            f"| {Path(r['file']).name} | {r['verdict']} | {r['wall_s']:.2f} | "
            f"{r['unavoidable_s']:.2f} | {r['harness_s']:.2f} | {r['outside_phases_s']:.2f} |"
        )
    within = sum(r["harness_s"] <= target_s for r in split)
    fixed = [r["outside_phases_s"] for r in split]
    print(
        f"harness share <= {target_s:g} s in {within} of {len(split)} evaluations; "
        f"fixed cost outside phases {min(fixed):.2f}-{max(fixed):.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--gap-s",
        type=float,
        default=None,
        help="pause before each paced warm evaluation (default 20 s on a GPU, 3 s on CPU)",
    )
    parser.add_argument(
        "--modes",
        default="cold,warm,warm_paced",
        help="comma-separated subset of cold, warm (back to back) and warm_paced",
    )
    parser.add_argument("--from-rows", type=Path, help="recorded evaluations (JSON lines)")
    parser.add_argument("--catalog", type=Path, help="catalog_full_scale.py record (anchor)")
    args = parser.parse_args(argv)
    if args.from_rows:
        rows = [json.loads(line) for line in args.from_rows.read_text().splitlines() if line]
        catalog: dict[str, dict[str, Any]] = {}
        if args.catalog:
            catalog = {p["id"]: p for p in json.loads(args.catalog.read_text())["problems"]}
        split = split_recorded(rows, catalog)
        if args.json:
            print(json.dumps(split, indent=2))
        else:
            print_split(split)
        return 0
    device = resolve_device(args.device)
    source = SUBMISSION.read_text()
    request = GradeRequest("p28", "cute", source, device=device)
    config = EvalConfig(dsl_checks=False)
    modes = [m for m in ("cold", "warm", "warm_paced") if m in args.modes.split(",")]
    gap_s = args.gap_s if args.gap_s is not None else (20.0 if device == "cuda" else 3.0)
    report: dict[str, Any] = {"device": device, "static_rules_ms": static_rules_ms(source)}
    for mode in modes:
        if mode == "cold":
            report[mode] = run_cold(request, config, device, args.repeats)
        else:
            gap = gap_s if mode == "warm_paced" else 0.0
            report[mode] = asyncio.run(run_warm(request, config, device, args.repeats, gap))
    report["timer_floor_ms"] = timer_floor_ms(device)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"grading overhead on {device} ({args.repeats} evaluations each)")
    for label, ms in report["static_rules_ms"].items():
        print(f"  static rules, {label} source: {ms:.2f} ms")
    for mode in modes:
        r = report[mode]
        extra = ""
        if mode != "cold":
            extra = f", warm parent start {r['warm_parent_start_s']:.2f} s, gap {r['gap_s']:g} s"
        print(
            f"  {mode}: wall median {r['wall_median_s']:.2f} s (min {r['wall_min_s']:.2f})"
            f"{extra}; verdicts {r['verdicts']}"
        )
        print(f"    phases (median s): {r['phases_median_s']}")
        print(
            f"    impl median {r['impl_median_ms']:.4g} ms, eager median "
            f"{r['eager_median_ms']:.4g} ms"
        )
    print(f"  timer floor (a call that does nothing): {report['timer_floor_ms'] * 1e3:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
