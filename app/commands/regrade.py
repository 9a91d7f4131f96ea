"""`mkb regrade FILE`: every implementation of a bundle graded again on this host, then the
agreement report (printed and stored with the re-graded experiment)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "regrade", help="grade a bundle's implementations again here; report the agreement"
    )
    parser.add_argument("file", metavar="FILE", help="a bundle from `mkb bundle export`")
    add_db_argument(parser)
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto (default: the GPU when present, else CPU preview), cpu, cuda",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="gradings at once (default 1; on a GPU, one per GPU at most)",
    )
    parser.add_argument(
        "--allow-changed",
        action="store_true",
        help="grade problems whose source here differs from the bundle's "
        "(they are named in the report either way)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def _backend(bundle: Any, device: str, jobs: int) -> Any:
    """The local grading backend through the engine's factory, with the bundle's grading
    options that change a measurement (kernel audit, warm calls)."""
    from engine.config import ExperimentConfig
    from engine.factory import make_backend

    options = {
        k: v
        for k, v in (bundle.grading.get("options") or {}).items()
        if k in ("kernel_audit", "warm_calls")
    }
    if device == "cpu":
        options["gpus"] = "none"
    options["preview_slots"] = jobs
    config = ExperimentConfig(
        name="regrade", id="regrade", models=(), grading="local", grading_options=options
    )
    return make_backend(config)


async def _run(args: argparse.Namespace, bundle: Any) -> dict[str, Any]:
    from engine.bundle.hosts import describe_this_host
    from engine.bundle.regrade import RegradeOptions, run_regrade
    from engine.bundle.report import build_report
    from storage import provenance
    from storage.sanitize import clean_text
    from storage.store import Store

    host = describe_this_host()
    opts = RegradeOptions(device=args.device, jobs=args.jobs, allow_changed=args.allow_changed)
    backend = _backend(bundle, args.device, args.jobs)

    def graded(job: Any, feedback: Any) -> None:
        print(
            clean_text(
                f"graded {job.problem_id} {job.dsl} {job.purpose} "
                f"(submission {job.submission_id}): {feedback.verdict}"
                f"{' ' + feedback.reason if feedback.reason else ''}"
            ),
            file=sys.stderr,
            flush=True,
        )

    store = Store(args.db)
    try:
        setup = await run_regrade(
            store, bundle, backend, opts, on_graded=graded, command=" ".join(["mkb", *sys.argv[1:]])
        )
        report = await store.read(build_report, bundle, setup, host, device=args.device)
        await store.write(provenance.add_report, setup.regrade_id, "regrade", report)
        return report
    finally:
        await backend.close()
        store.close()


def run(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.bundle.archive import BundleError
    from engine.bundle.content import load_bundle
    from engine.bundle.hosts import describe_this_host
    from engine.bundle.report import render_report
    from storage.db import StorageError
    from storage.run_locks import ExperimentBusyError
    from storage.sanitize import clean

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.device == "cuda" and not describe_this_host()["gpus"]:
        raise UsageError(
            "--device cuda: this host has no NVIDIA GPU (use --device cpu for a "
            "CPU preview re-grade)"
        )
    try:
        bundle = load_bundle(args.file)
    except BundleError as exc:
        raise UsageError(str(exc)) from exc
    try:
        report = asyncio.run(_run(args, bundle))
    except (StorageError, ExperimentBusyError) as exc:
        raise UsageError(str(exc)) from exc
    report = clean(report)
    print(json.dumps(report, indent=2) if args.json else render_report(report))
    verdicts = report["verdicts"]
    return 0 if verdicts["compared"] and not verdicts["changed"] else 1
