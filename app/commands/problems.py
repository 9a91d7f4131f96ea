"""`mkb problems`: list the catalog, show one problem, validate problems."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

from app.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "problems",
        help="list, show and validate the problem catalog",
        description="List, show and validate the problem catalog.",
    )
    sub = parser.add_subparsers(dest="problems_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: _help(parser))

    p_list = sub.add_parser("list", help="list the problems")
    p_list.add_argument("--family", default=None, help="only this family (name or folder)")
    p_list.add_argument("--json", action="store_true", help="print JSON")
    p_list.set_defaults(func=list_handler)

    p_show = sub.add_parser("show", help="describe one problem (id, number or slug)")
    p_show.add_argument("id", help="p28, 28 or a slug")
    p_show.add_argument("--json", action="store_true", help="print JSON")
    p_show.set_defaults(func=show_handler)

    p_check = sub.add_parser("check", help="validate problems (see python -m problems.check)")
    from problems.check_args import add_arguments

    add_arguments(p_check)
    p_check.set_defaults(func=check_handler)

    p_memory = sub.add_parser(
        "memory",
        help="each problem's planned GPU memory (judge, runner) and whether it fits a card",
        description="Each problem's planned GPU memory for one grading (the judge, the "
        "runner, the grading's peak on one card, CUDA contexts included), computed from the "
        "draws' shapes and dtypes without a GPU, and whether it fits a card of --gpu-memory "
        "GB with the headroom kept free. Exit status 1 when a problem does not fit.",
    )
    p_memory.add_argument("ids", nargs="*", help="problems (default: all)")
    p_memory.add_argument(
        "--gpu-memory", type=float, default=80.0, metavar="GB", help="the card's size (80)"
    )
    p_memory.add_argument("--scale", choices=("full", "smoke"), default="full")
    p_memory.add_argument("--json", action="store_true", help="print JSON")
    p_memory.add_argument(
        "--write-plans",
        action="store_true",
        help="trace the problems at both scales and store their plans "
        "(problems/memory_plans.json, read by admission instead of tracing)",
    )
    p_memory.set_defaults(func=memory_handler)

    p_compare = sub.add_parser(
        "compare", help="compare our references with a local checkout of upstream MetaKernelBench"
    )
    from problems.fidelity_args import add_compare_arguments

    add_compare_arguments(p_compare)
    p_compare.set_defaults(func=compare_handler)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


def _selection(keys: list[str], family: str | None = None) -> Any:
    from problems.check import select

    try:
        return select(keys, family)
    except KeyError as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from None


def _warn_broken(selection: Any) -> None:
    for report in selection.load_errors:
        print(f"warning: {report.error}", file=sys.stderr)


def list_handler(args: argparse.Namespace) -> int:
    selection = _selection([], args.family)
    _warn_broken(selection)
    problems = sorted(selection.problems, key=lambda p: p.number)
    if args.json:
        print(json.dumps([p.summary() for p in problems], indent=2))
        return 0
    for p in problems:
        print(f"{p.id}  {p.family:<16} {p.origin:<13} {p.slug}")
    print(f"{len(problems)} problems")
    return 0


def _show_data(problem: Any) -> dict[str, Any]:
    from problems.measured import measured
    from problems.shapes import signature
    from problems.sol import H200, sol_estimate

    sig = signature(problem)
    cost = problem.cost("full")
    sol = sol_estimate(cost, H200)
    return {
        **problem.summary(),
        "description": problem.description,
        "notes": problem.notes,
        "path": str(problem.path),
        "workload": dict(problem.workload),
        "smoke": dict(problem.smoke),
        "shapes_scale": sig.scale,
        "shapes_note": sig.note,
        "inputs": [a.as_dict() for a in sig.inputs],
        "outputs": [a.as_dict() for a in sig.outputs],
        "inplace": dict(problem.inplace),
        "decision_margin": problem.decision_margin,
        "cost": {"flops": dict(cost.flops), "bytes": cost.bytes},
        "sol": {"hardware": H200.name, **sol.as_dict()},
        "measured": measured(problem.id),
        "_signature": sig,
    }


def _fmt_count(x: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} "


def show_handler(args: argparse.Namespace) -> int:
    selection = _selection([args.id])
    if selection.load_errors and not selection.problems:
        for report in selection.load_errors:
            print(f"mkb: {report.error}", file=sys.stderr)
        return 1
    if len(selection.problems) != 1:
        raise UsageError(f"{args.id!r} names {len(selection.problems)} problems; give one")
    data = _show_data(selection.problems[0])
    sig = data.pop("_signature")
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    wrap = textwrap.TextWrapper(width=96, initial_indent="  ", subsequent_indent="  ")
    lines = [
        f"{data['id']}  {data['slug']}",
        f"family: {data['family']}    origin: {data['origin']}",
        f"source: {data['source']}",
        f"license: {data['license']}",
        "",
        "description:",
        wrap.fill(data["description"]),
    ]
    if data["notes"]:
        lines += ["notes:", wrap.fill(" ".join(data["notes"].split()))]
    lines += ["", "workload: " + ", ".join(f"{k}={v}" for k, v in data["workload"].items())]
    lines.append(f"inputs ({sig.scale} workload):")
    lines += [f"  {a.describe()}" for a in sig.inputs]
    lines.append(f"outputs ({sig.scale} workload):")
    lines += [f"  {a.describe()}" for a in sig.outputs]
    if sig.note:
        lines.append(f"  note: {sig.note}")
    if data["inplace"]:
        lines.append("in place: " + ", ".join(f"{o} ← {i}" for o, i in data["inplace"].items()))
    if data["decision_margin"] is not None:
        lines.append(f"decision margin: {data['decision_margin']:g}")
    flops = data["cost"]["flops"]
    flop_text = ", ".join(f"{_fmt_count(v)}FLOP {k}" for k, v in flops.items()) or "none"
    sol = data["sol"]
    lines += [
        "",
        f"cost: {flop_text}; {_fmt_count(data['cost']['bytes'])}B compulsory DRAM traffic",
        f"SOL on {sol['hardware']}: {sol['sol_us']:.1f} µs ({sol['bound']}-bound; "
        f"compute {sol['compute_us']:.1f} µs, memory {sol['memory_us']:.1f} µs)",
    ]
    m = data["measured"]
    if m:
        lines.append(
            f"measured on {m['device']} ({m['measured_on']}): eager median "
            f"{m['eager_median_ms']:.3f} ms, float64 anchor {m['anchor_s']:.3f} s, "
            f"peak {m['peak_gpu_gb']} GB ({m['eager_median_ms'] / (sol['sol_us'] / 1e3):.1f}× SOL)"
        )
    else:
        lines.append("measured eager time: not recorded yet")
    print("\n".join(lines))
    return 0


def check_handler(args: argparse.Namespace) -> int:
    from problems.check import run_from_args

    try:
        return run_from_args(args)
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from None


def memory_handler(args: argparse.Namespace) -> int:
    from problems.memory_table import format_row, memory_rows, summary

    if args.gpu_memory <= 0:
        raise UsageError("--gpu-memory must be a positive number of GB")
    selection = _selection(args.ids)
    _warn_broken(selection)
    if args.write_plans:
        from problems.memory_store import STORE_PATH
        from problems.memory_table import write_plans

        size = write_plans(selection.problems, progress=lambda line: print(line, flush=True))
        print(f"{STORE_PATH}: {size} stored plans")
    progress = None if args.json else (lambda row: print(format_row(row), flush=True))
    rows = memory_rows(selection.problems, args.gpu_memory, args.scale, progress)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print(summary(rows, args.gpu_memory, args.scale))
    return 1 if any(r.fits is False for r in rows) else 0


def compare_handler(args: argparse.Namespace) -> int:
    from problems.fidelity_cli import run_compare

    try:
        return run_compare(args)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from None
