"""Options of ``mkb problems compare`` (no heavy imports, so ``mkb --help`` stays fast)."""

from __future__ import annotations

import argparse


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the fidelity report."""
    parser.add_argument("ids", nargs="*", help="only these problems (ids, numbers, slugs, globs)")
    parser.add_argument(
        "--upstream",
        required=True,
        metavar="PATH",
        help="local checkout of the public MetaKernelBench (or its problems/ folder)",
    )
    parser.add_argument(
        "--sol-execbench",
        default=None,
        metavar="PATH",
        help="local copy of the SOL-ExecBench dataset (L1/L2/Quant parquet files or folders) "
        "to rebuild upstream's SOL-ExecBench-derived problems from its recipes",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--seed", type=int, default=20, help="seed of both draws (default 20)")
    parser.add_argument(
        "--budget-gb",
        type=float,
        default=None,
        help="memory for one problem's draw (default: 6 on cpu, 100 on cuda); bigger full-scale "
        "draws run at smoke scale with our generator and are skipped with upstream's",
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", metavar="OUT", help="write the rows as JSON ('-' for stdout)")
    out.add_argument("--csv", metavar="OUT", help="write the table as CSV ('-' for stdout)")
    out.add_argument("--markdown", metavar="OUT", help="write a Markdown table ('-' for stdout)")
