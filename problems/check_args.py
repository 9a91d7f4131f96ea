"""Command-line options of the validator, kept free of heavy imports so ``mkb --help`` is fast."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Validator options, shared by ``python -m problems.check`` and ``mkb problems check``."""
    parser.add_argument("ids", nargs="*", help="ids (p28), numbers, slugs, globs or .py paths")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--scale", choices=("smoke", "full"), default="smoke")
    parser.add_argument("--family", default=None, help="only problems of this family")
    parser.add_argument("--draws", type=int, default=3, help="draws per problem (≥ 2)")
    parser.add_argument(
        "--discrete-draws", type=int, default=None, help="draws for discrete_agree (20 smoke)"
    )
    parser.add_argument("--seed", type=int, default=None, help="base seed (default: per id)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="on cuda, check every problem in this process (default: one child per problem)",
    )
    parser.add_argument(
        "--gpu",
        choices=("b200", "h200", "h100"),
        default=None,
        help="instead of the draws: each problem's memory need and SOL on this grading GPU, "
        "from shapes (no GPU needed); exit 1 when one does not fit",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="children checked at once (one per problem); a child that runs out of memory "
        "beside others is checked again alone",
    )
