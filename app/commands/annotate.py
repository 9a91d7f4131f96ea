"""`mkb annotate`: label skills, uptake and failure causes with LLM annotators (litellm)."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from app.commands.db import add_db_argument
from app.commands.rubric import add_rubric_argument, load_rubric_arg, open_store_db, pick_experiment

WHAT = {"skills": "skill", "uptake": "uptake", "causes": "cause"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "annotate", help="LLM labels: skill content, uptake/propagation, failure causes")
    add_db_argument(parser)
    parser.add_argument("--experiment", help="experiment id (default: newest)")
    parser.add_argument("--what", action="append", choices=sorted(WHAT), default=[],
                        help="what to label (repeatable; default: all three)")
    parser.add_argument("--annotator", nargs="+", action="extend", default=[], metavar="MODEL",
                        help="litellm model name(s), e.g. openai/gpt-x (several allowed)")
    parser.add_argument("--api-base", help="OpenAI-compatible base URL for every annotator")
    parser.add_argument("--api-key-env", metavar="VAR",
                        help="environment variable holding the API key (default: litellm's)")
    parser.add_argument("--tries", type=int, default=3, help="calls per item (default 3)")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight (default 4)")
    parser.add_argument("--force", action="store_true",
                        help="relabel items this annotator already labelled with this rubric")
    add_rubric_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.rubric.annotate import Annotator, annotate
    from storage.sanitize import clean_text
    from storage.store import Store

    if not args.annotator:
        raise UsageError("give at least one --annotator MODEL")
    if args.tries < 1 or args.concurrency < 1:
        raise UsageError("--tries and --concurrency must be at least 1")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise UsageError(f"environment variable {args.api_key_env} is not set")
    rubric = load_rubric_arg(args.rubric)
    db = open_store_db(args.db, readonly=False)
    try:
        experiment = pick_experiment(db, args.experiment)
    finally:
        db.conn.close()
    tasks = [WHAT[w] for w in dict.fromkeys(args.what or WHAT)]
    annotators = [Annotator(m, args.api_base, api_key) for m in dict.fromkeys(args.annotator)]

    def progress(outcome: Any) -> None:
        status = "ok" if outcome.error is None else f"FAILED: {outcome.error}"
        line = f"{outcome.subject.title} <- {outcome.annotator}: {status}"
        print(clean_text(line), flush=True)  # errors quote the model's reply

    async def go() -> Any:
        with Store(args.db) as store:
            return await annotate(store, annotators, tasks=tasks, experiment_id=experiment,
                                  rubric=rubric, tries=args.tries,
                                  concurrency=args.concurrency, force=args.force,
                                  on_outcome=progress)

    summary = asyncio.run(go())
    print(f"experiment {experiment}: {summary.done} labelled, {summary.failed} failed, "
          f"{summary.skipped} already labelled; tokens {summary.usage.tokens_in} in / "
          f"{summary.usage.tokens_out} out, ${summary.usage.cost_usd:.4f}")
    return 1 if summary.failed else 0
