"""`mkb grade PROBLEM --dsl cute|tirx IMPL.py`: grade one submission in a fresh child process.

Exit codes: 0 on a scored pass, and also on a CPU preview that met every check it could run
(printed as PREVIEW, never as a pass); 1 on a failed verdict or a grading error; 2 on a usage
error (unknown problem, missing file, bad --dsl or --device).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.grading import options


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "grade",
        help="grade one submission against a problem (CPU preview without a GPU)",
        description="Grade IMPL.py (defining solve(*inputs)) against PROBLEM in a fresh "
        "child process: static rules, correctness draws, timing, DSL launch checks.",
    )
    parser.add_argument("problem", metavar="PROBLEM", help="problem id (p28), number or slug")
    parser.add_argument("impl", metavar="IMPL.py", help="the submission file")
    parser.add_argument("--dsl", required=True, help="cute or tirx")
    parser.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    parser.add_argument("--json", action="store_true", help="print the feedback as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds for import, correctness, warmup, timing (default 600)",
    )
    parser.add_argument(
        "--scale",
        choices=("full", "smoke"),
        default=None,
        help="workload scale (default: full on GPU, smoke in CPU preview)",
    )
    options.add_arguments(parser, "grade")  # the contract's options (engine/grading/options.py)
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=None,
        help="memory limit of the child in MiB (default 16384 in CPU preview)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="grade N times, each in a fresh child, and report the median speedup and its "
        "spread (small calls move with the host's CPU speed; default 1, at most 20)",
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from engine.grading import repeats
    from engine.grading.options import EvalConfig
    from engine.grading.parent.evaluate import grade_in_subprocess

    if not 1 <= args.repeat <= repeats.MAX_REPEATS:
        return usage_error(f"--repeat must be within 1..{repeats.MAX_REPEATS} (got {args.repeat})")
    try:
        request, device = request_from_args(args)
    except ValueError as exc:
        return usage_error(str(exc))
    config = EvalConfig(
        timeout_s=args.timeout,
        scale=args.scale,
        memory_limit_mb=args.memory_mb,
        **options.from_args(args, "grade"),
    )
    feedbacks = []
    for i in range(args.repeat):
        fb = grade_in_subprocess(request, config, device).to_dict()
        feedbacks.append(fb)
        if not args.json:
            prefix = f"[{i + 1}/{args.repeat}] " if args.repeat > 1 else ""
            print(prefix + render(fb).replace("\n", "\n" + " " * len(prefix)), flush=True)
    summary = repeats.summarize(feedbacks)
    if args.json:
        out = feedbacks[0] if args.repeat == 1 else {"summary": summary, "gradings": feedbacks}
        json.dump(out, sys.stdout, indent=2, default=str)
        print()
    elif args.repeat > 1:
        print(repeats.render(summary))
    return 0 if summary["all_passed"] else 1


def request_from_args(args: argparse.Namespace) -> tuple[Any, str]:
    """The grading request and device that ``args`` (problem, ``--dsl``, ``--device``, the
    file) name; a ValueError saying what is wrong. Shared with ``mkb noise``."""
    from engine.grading.api import DSLS, GradeRequest
    from engine.grading.parent.evaluate import gpu_count, resolve_problem

    if args.dsl not in DSLS:
        raise ValueError(f"--dsl must be one of {', '.join(DSLS)} (got {args.dsl!r})")
    if args.device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu or cuda (got {args.device!r})")
    problem_id = resolve_problem(args.problem)
    if problem_id is None:
        raise ValueError(f"unknown problem {args.problem!r} (use an id like p28 or a slug)")
    path = Path(args.impl)
    if not path.is_file():
        raise ValueError(f"no such file: {args.impl}")
    device = args.device
    if device == "auto":
        device = "cuda" if gpu_count() > 0 else "cpu"
    elif device == "cuda" and gpu_count() == 0:
        raise ValueError("--device cuda: no CUDA device is visible on this host")
    source = path.read_text(encoding="utf-8", errors="surrogateescape")
    return GradeRequest(problem_id, args.dsl, source, device=device, request_id=path.name), device


def usage_error(message: str) -> int:
    """Print a usage error and return exit code 2.

    Printed here rather than raised as ``app.cli.UsageError`` so the code is also right when
    the CLI runs as ``python -m app.cli`` (where ``__main__.UsageError`` is another class).
    """
    print(f"mkb: error: {message}", file=sys.stderr)
    return 2


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g} ms"


def render(fb: dict[str, Any]) -> str:
    """A human-readable summary of a feedback record."""
    verdict = fb["verdict"]
    lines: list[str] = []
    if verdict == "pass":
        lines.append(f"PASS  {fb['problem_id']} ({fb['dsl']}) on {fb['device']}")
    elif verdict == "preview":
        lines.append(
            f"PREVIEW  {fb['problem_id']} ({fb['dsl']}) on CPU: every check that can "
            "run without a GPU passed. This is NOT a scored pass."
        )
    else:
        label = "FAIL" if verdict == "fail" else "ERROR"
        lines.append(f"{label}  {fb['problem_id']} ({fb['dsl']}): {fb.get('reason')}")
    if fb.get("jailed") is False:
        lines.append("  UNSAFE: the submission ran without the grading jail (--unsafe-no-jail)")
    if fb.get("message") and verdict not in ("preview",):
        lines.append(f"  {fb['message']}")
    for f in fb.get("findings", []):
        where = f"line {f['line']}" if f.get("line") else "source"
        lines.append(f"  [{f['code']}] {where}: {f['message']}")
    if fb.get("import_error"):
        lines.append("  error:")
        lines.extend("    " + line for line in str(fb["import_error"]).splitlines()[-12:])
    for draw in fb.get("draws", []):
        for out in draw.get("outputs", []):
            if out.get("max_error") is None:
                continue
            mark = "ok " if out["passed"] else "BAD"
            lines.append(
                f"  {mark} {draw['kind']} {draw['index']} {out['name']}: max error "
                f"{out['max_error']:.3e} / allowance {out['allowance']:.3e}"
            )
    if fb.get("impl_median_ms") is not None:
        lines.append(
            f"  implementation: median {_ms(fb['impl_median_ms'])} (IQR {_ms(fb['impl_iqr_ms'])})"
        )
    if fb.get("eager_median_ms") is not None:
        lines.append(
            f"  eager reference: median {_ms(fb['eager_median_ms'])} "
            f"(IQR {_ms(fb['eager_iqr_ms'])})"
        )
    if fb.get("speedup") is not None:
        note = " (preview timing, perf_counter on CPU; not a score)" if verdict == "preview" else ""
        lines.append(f"  speedup: {fb['speedup']:.3g}x{note}")
    warm = (fb.get("clock") or {}).get("warm_calls")
    if warm:
        lines.append(
            f"  warm calls (untimed, before each timed call): {warm.get('submission', 0)} "
            f"submission, {warm.get('eager', 0)} eager"
        )
    if fb.get("import_ok"):
        launches = fb.get("dsl_launches_per_call")
        shown = "skipped: no GPU" if launches is None and verdict == "preview" else launches
        lines.append(f"  DSL launches per call: {'—' if shown is None else shown}")
        lines.append(f"  bypass test: {fb.get('bypass') or '—'}")
        audit = fb.get("kernel_audit")
        if audit:
            lines.append(
                f"  kernel audit (profiler): {audit['status']} "
                f"({audit['dsl_kernel_runs']} DSL kernel runs seen, mode {audit['mode']})"
            )
    return "\n".join(lines)
