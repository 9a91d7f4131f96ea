"""The grading path against a plain process, on one host, interleaved so that host drift hits
both sides alike: how much the grader moves a solution's speedup and adds to its spread.

    PYTHONPATH=. python3 benchmarks/grader_vs_plain_gpu.py OUT.jsonl FILES... \
        [--rounds 5] [--device cuda|cpu] [--unjailed]

Each round, for each file, in alternating order (plain first in odd rounds, the grader first in
even ones): one fresh plain process (``benchmarks/plain_timing.py``: the runner's timing method
without judge, jail or socket, then with the DSL launch hooks installed) and one grading through
a warm local backend (a fresh runner per grading, as in an experiment); ``--unjailed`` adds one
grading without the jail (``unsafe_no_jail``) to see the jail's share, and ``--variant V``
(repeatable) one grading with that variant (``VARIANTS``: the profiler attached at the
runner's start as before, no CPU placement, the runner's 10 ms poll between calls as before).
Every row goes to
OUT.jsonl as it comes; the summary (per file: both medians and spreads, the runner's and the
plain process's host µs per call, and where the difference goes) is printed at the end and
written beside it as OUT.summary.json. On the CPU (``--device cpu``) it is a PREVIEW of the
method only: the figures are not comparable with a GPU's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.plain_timing import FILE_NAME  # noqa: E402
from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.backends.local import LocalBackend  # noqa: E402
from engine.grading.options import EvalConfig  # noqa: E402

# the grading path's variants, each graded beside the default ("jailed") every round
VARIANTS: dict[str, tuple[Any, dict[str, Any]]] = {
    "unjailed": (lambda: EvalConfig(unsafe_no_jail=True), {}),
    # the runner attaches CUPTI at its start, as it did before PROFILER_START (runner/loop.py)
    "profiler-early": (lambda: EvalConfig(env={"MKB_PROFILER_START": "early"}), {}),
    # no CPU placement (judge/placement.py): runner and judge left to the scheduler
    "no-placement": (EvalConfig, {"cpu_placement": "off"}),
    # the runner polls 10 ms after a timed call's report, as before the call-gap poll
    # (judge/state.py CALL_GAP_SPIN_MS)
    "no-gap-spin": (lambda: EvalConfig(env={"MKB_CALL_GAP_SPIN_MS": "0"}), {}),
}


def plain_row(path: Path, device: str, calls: int) -> dict[str, Any]:
    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "plain_timing.py"),
            str(path),
            "--device",
            device,
            "--calls",
            str(calls),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"kind": "plain", "file": path.name, "error": out.stderr[-800:]}
    row = json.loads(lines[-1])
    row.update(kind="plain", wall_s=round(time.perf_counter() - started, 2))
    return row


def grading_row(feedback: dict[str, Any], path: Path, variant: str, wall: float) -> dict[str, Any]:
    breakdown = (feedback.get("clock") or {}).get("breakdown") or {}
    submission = breakdown.get("submission") or {}
    eager = breakdown.get("eager") or {}

    def us(value: Any) -> float | None:
        return None if value is None else round(float(value) * 1e3, 3)

    return {
        "kind": "grading",
        "variant": variant,
        "file": path.name,
        "verdict": feedback.get("verdict"),
        "reason": feedback.get("reason"),
        "speedup": feedback.get("speedup"),
        "impl_median_us": us(feedback.get("impl_median_ms")),
        "eager_median_us": us(feedback.get("eager_median_ms")),
        "solution": {
            "host_us": us(submission.get("host_ms")),
            "e2e_us": us(submission.get("e2e_ms")),
            "device_us": us(submission.get("device_ms")),
            "span_us": us(submission.get("span_ms")),
        },
        "eager": {
            "host_us": us(eager.get("host_ms")),
            "e2e_us": us(eager.get("e2e_ms")),
            "device_us": us(eager.get("device_ms")),
            "span_us": us(eager.get("span_ms")),
        },
        "cpu_placement": (feedback.get("clock") or {}).get("cpu_placement"),
        "timings_s": feedback.get("timings_s"),
        "wall_s": round(wall, 2),
    }


def spread(values: list[float]) -> dict[str, Any]:
    """Median, max/min and the SD of the log of a list of positive figures."""
    values = [v for v in values if v and v > 0]
    if not values:
        return {"n": 0}
    logs = [math.log(v) for v in values]
    return {
        "n": len(values),
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "max_over_min": round(max(values) / min(values), 4),
        "log_sd": round(statistics.stdev(logs), 4) if len(logs) > 1 else None,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted({r["file"] for r in rows}):
        plain = [r for r in rows if r["file"] == name and r["kind"] == "plain" and "error" not in r]
        graded = [r for r in rows if r["file"] == name and r["kind"] == "grading"]
        jailed = [r for r in graded if r["variant"] == "jailed" and r["speedup"]]
        unjailed = [r for r in graded if r["variant"] == "unjailed" and r["speedup"]]
        others = sorted({r["variant"] for r in graded} - {"jailed"})

        def med(items: list[dict[str, Any]], *keys: str) -> float | None:
            found = []
            for item in items:
                value: Any = item
                for key in keys:
                    value = value.get(key) if isinstance(value, dict) else None
                if isinstance(value, (int, float)):
                    found.append(float(value))
            return round(statistics.median(found), 3) if found else None

        plain_speedup = spread([r["speedup_e2e"] for r in plain])
        span_speedups = [
            r["eager"]["span_us"] / r["solution"]["span_us"]
            for r in jailed
            if r["eager"].get("span_us") and r["solution"].get("span_us")
        ]
        grader_speedup = spread([r["speedup"] for r in jailed])
        gap = None
        if plain_speedup.get("median") and grader_speedup.get("median"):
            gap = round(grader_speedup["median"] / plain_speedup["median"] - 1.0, 4)
        out[name] = {
            "plain_speedup_e2e": plain_speedup,
            "plain_speedup_device": spread([r["speedup_device"] for r in plain]),
            "grader_speedup": grader_speedup,
            "grader_unjailed_speedup": spread([r["speedup"] for r in unjailed]),
            # the GPU span (taken after the timed calls): its spread against end to end's
            "grader_span_speedup": spread(span_speedups),
            "grader_vs_plain": gap,
            "host_us_per_call": {
                "plain": med(plain, "solution", "host_us"),
                "plain_with_hooks": med(plain, "hooks", "host_us"),
                "runner_jailed": med(jailed, "solution", "host_us"),
                "runner_unjailed": med(unjailed, "solution", "host_us"),
            },
            "e2e_us_per_call": {
                "plain": med(plain, "solution", "e2e_us"),
                "plain_with_hooks": med(plain, "hooks", "e2e_us"),
                "runner_jailed": med(jailed, "solution", "e2e_us"),
                "grader_scored": med(jailed, "impl_median_us"),
            },
            "eager_us": {
                "plain": med(plain, "eager", "e2e_us"),
                "grader": med(jailed, "eager_median_us"),
            },
            "variants": {
                v: {
                    "speedup": spread([r["speedup"] for r in graded if r["variant"] == v]),
                    "host_us": med([r for r in graded if r["variant"] == v], "solution", "host_us"),
                }
                for v in others
            },
            "verdicts": sorted({str(r["verdict"]) for r in graded}),
        }
    return out


async def run(args: argparse.Namespace) -> int:
    files = [Path(f).resolve() for f in args.files]
    for path in files:
        if not FILE_NAME.match(path.name):
            raise SystemExit(f"{path}: the name must start with pNN_cute or pNN_tirx")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    gpus: str | None = "auto" if args.device == "cuda" else None
    backends = {"jailed": LocalBackend(gpus=gpus, config=EvalConfig())}
    variants = list(args.variant) + (["unjailed"] if args.unjailed else [])
    for variant in dict.fromkeys(variants):
        config, options = VARIANTS[variant]
        backends[variant] = LocalBackend(gpus=gpus, config=config(), **options)
    for backend in backends.values():
        await backend.start()
    rows: list[dict[str, Any]] = []
    try:
        with out.open("w") as sink:
            for round_no in range(1, args.rounds + 1):
                for path in files:
                    match = FILE_NAME.match(path.name)
                    assert match is not None
                    steps = ["plain", *backends] if round_no % 2 else [*backends, "plain"]
                    for step in steps:
                        if step == "plain":
                            row = await asyncio.to_thread(plain_row, path, args.device, args.calls)
                        else:
                            request = GradeRequest(
                                match.group(1),
                                match.group(2),
                                path.read_text(),
                                device=args.device,
                                request_id=path.name,
                            )
                            started = time.perf_counter()
                            feedback = (await backends[step].grade(request)).to_dict()
                            row = grading_row(feedback, path, step, time.perf_counter() - started)
                        row["round"] = round_no
                        rows.append(row)
                        sink.write(json.dumps(row) + "\n")
                        sink.flush()
                        print(
                            json.dumps(
                                {
                                    k: row.get(k)
                                    for k in (
                                        "round",
                                        "kind",
                                        "variant",
                                        "file",
                                        "verdict",
                                        "speedup",
                                        "speedup_e2e",
                                        "error",
                                    )
                                }
                            ),
                            flush=True,
                        )
    finally:
        for backend in backends.values():
            await backend.close()
    summary = {
        "device": args.device,
        "preview": args.device != "cuda",
        "rounds": args.rounds,
        "files": summarize(rows),
    }
    Path(str(out) + ".summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50, help="timed calls per plain process")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--unjailed", action="store_true", help="also grade without the jail")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        choices=sorted(VARIANTS),
        help="also grade with this variant of the grading path (repeatable)",
    )
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
