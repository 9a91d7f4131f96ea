"""`mkb tasks`: build Harbor task directories (one per problem × DSL) and check them."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.errors import UsageError

DEFAULT_OUT = "mkb-data/tasks"
GPUS = ("b200", "h200", "h100")  # problems/targets.py (kept literal: mkb --help stays fast)
DEFAULT_GPU = "h200"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tasks",
        help="build Harbor task variants (problem × DSL)",
        description="Build and check Harbor task directories, one per problem × DSL.",
    )
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])

    build = sub.add_parser("build", help="write task directories")
    build.add_argument("ids", nargs="*", help="problem ids, slugs or globs (default: all)")
    build.add_argument(
        "--dsl",
        choices=["cute", "tirx"],
        action="append",
        help="only this DSL (repeatable; default: both)",
    )
    build.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    build.add_argument("--budget-min", type=int, default=40, help="agent budget in minutes")
    build.add_argument("--max-submissions", type=int, default=10)
    build.add_argument(
        "--gpu",
        choices=GPUS,
        default=DEFAULT_GPU,
        help=f"the grading GPU the task names (its arch: b200 sm_100a, h200/h100 sm_90a; "
        f"default {DEFAULT_GPU})",
    )
    build.add_argument(
        "--solution",
        type=Path,
        default=None,
        help="a solution file to ship as solution/ (for oracle runs)",
    )
    build.set_defaults(func=build_handler)

    guides = sub.add_parser(
        "guides",
        help="show or fetch the DSLs' upstream guide pages (cached, copied into builds)",
        description="Upstream guide pages at the pinned DSL versions: listed from the local "
        "cache, or downloaded into it with --fetch (needs a network; failures are reported).",
    )
    guides.add_argument(
        "--dsl",
        choices=["cute", "tirx"],
        action="append",
        help="only this DSL (repeatable; default: both)",
    )
    guides.add_argument("--fetch", action="store_true", help="download missing pages")
    guides.add_argument("--refresh", action="store_true", help="with --fetch: download all again")
    guides.add_argument(
        "--base-url",
        default=None,
        help="raw-file server (default $MKB_GUIDES_BASE_URL or GitHub's)",
    )
    guides.set_defaults(func=guides_handler)

    check = sub.add_parser("check", help="report task directories that are stale")
    check.add_argument("dirs", nargs="+", type=Path, help="built task directories")
    check.add_argument(
        "--gpu", choices=GPUS, default=None, help="also report tasks built for another grading GPU"
    )
    check.set_defaults(func=check_handler)


def build_handler(args: argparse.Namespace) -> int:
    from engine.tasks.builder import build_task
    from problems import registry

    try:
        chosen = registry.catalog().select(args.ids or None)
    except KeyError as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from None
    if args.budget_min <= 0 or args.max_submissions <= 0:
        raise UsageError("--budget-min and --max-submissions must be positive")
    solution = None
    if args.solution is not None:
        if not args.solution.is_file():
            raise UsageError(f"--solution {args.solution} is not a file")
        solution = args.solution.read_text()
    out = Path(args.out)
    for problem in chosen:
        for dsl in args.dsl or ["cute", "tirx"]:
            built = build_task(
                problem.id,
                dsl,
                out,
                budget_s=args.budget_min * 60,
                max_submissions=args.max_submissions,
                solution_source=solution,
                gpu=args.gpu,
            )
            print(f"{built.path}  {built.inputs_sha256[:12]}")
    return 0


def check_handler(args: argparse.Namespace) -> int:
    from engine.tasks.builder import staleness

    stale = 0
    for folder in args.dirs:
        reasons = staleness(folder, args.gpu)
        if reasons:
            stale += 1
            print(f"{folder}: STALE: {'; '.join(reasons)}")
        else:
            print(f"{folder}: up to date")
    return 1 if stale else 0


def guides_handler(args: argparse.Namespace) -> int:
    import asyncio

    from engine.tasks import guides

    missing = 0
    for dsl in args.dsl or ["cute", "tirx"]:
        if args.fetch:
            report = asyncio.run(
                guides.fetch_guides(dsl, base_url=args.base_url, refresh=args.refresh)
            )
            print(
                f"{dsl} {report.tag}: {len(report.fetched)} fetched, {len(report.cached)} "
                f"already cached, {len(report.failed)} failed ({report.source})"
            )
            for page, why in report.failed.items():
                print(f"  failed {page}: {why}")
        cached = guides.cached_guides(dsl)
        wanted = guides.GUIDE_SETS[dsl].pages
        missing += len(wanted) - len(cached)
        print(f"{dsl}: {len(cached)}/{len(wanted)} pages in {guides.cache_dir(dsl)}")
    return 0 if missing == 0 or not args.fetch else 1
