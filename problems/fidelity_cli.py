"""``mkb problems compare``: the fidelity report against a local upstream checkout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from problems.fidelity import FidelityOptions, FidelityRow
from problems.fidelity_report import (
    compare_catalog,
    format_csv,
    format_json,
    format_markdown,
    format_text,
    summary,
)


def options(args: argparse.Namespace) -> FidelityOptions:
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for but no CUDA device is available")
    if not (args.device == "cpu" or args.device.startswith("cuda")):
        raise ValueError(f"unknown device {args.device!r} (use cpu or cuda)")
    budget = args.budget_gb
    if budget is None:
        budget = 6.0 if args.device == "cpu" else 100.0
    return FidelityOptions(device=args.device, seed=args.seed, budget_gb=budget)


def _write(text: str, target: str) -> None:
    if target == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        Path(target).write_text(text if text.endswith("\n") else text + "\n")
        print(f"wrote {target}", file=sys.stderr)


def run_compare(args: argparse.Namespace) -> int:
    """Compare, print progress lines, export; exit 0 (differences are findings, not errors)."""
    from problems.check import select

    opts = options(args)
    upstream = Path(args.upstream)
    if not upstream.exists():
        raise FileNotFoundError(f"--upstream {upstream}: no such directory")
    sol = Path(args.sol_execbench) if args.sol_execbench else None
    if sol is not None and not sol.exists():
        raise FileNotFoundError(f"--sol-execbench {sol}: no such directory")
    selection = select(args.ids)
    exporting = args.json or args.csv or args.markdown
    quiet_stdout = exporting == "-"

    def progress(row: FidelityRow) -> None:
        if not quiet_stdout:
            print(format_text([row]).rsplit("\n", 1)[0], flush=True)

    rows = compare_catalog(selection.problems, upstream, sol, opts, progress)
    if args.json:
        _write(format_json(rows), args.json)
    elif args.csv:
        _write(format_csv(rows), args.csv)
    elif args.markdown:
        _write(format_markdown(rows), args.markdown)
    if not quiet_stdout:
        print(f"{len(rows)} problems: {summary(rows)}")
    return 0
