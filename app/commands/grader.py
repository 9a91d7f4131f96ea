"""`mkb grader serve`: run the grading service on this host (one evaluation per GPU).

    mkb grader serve --host 0.0.0.0 --port 8765 --gpus auto --token SECRET

The token may also come from MKB_GRADER_TOKEN; without one the service only listens on the
loopback interface. On a host without GPUs it grades in CPU preview with --preview-slots
slots.
"""

from __future__ import annotations

import argparse
import os
import sys

from engine.grading import options


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("grader", help="run the grading service (http backend)")
    actions = parser.add_subparsers(dest="grader_command", metavar="ACTION")
    serve = actions.add_parser("serve", help="serve POST /grade, GET /status and /health")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument(
        "--gpus",
        default="auto",
        help="auto (every visible GPU), none (CPU preview), or a list like 0,1",
    )
    serve.add_argument("--token", default=None, help="bearer token (default $MKB_GRADER_TOKEN)")
    serve.add_argument(
        "--preview-slots",
        type=int,
        default=1,
        help="concurrent CPU-preview evaluations on a host without GPUs",
    )
    serve.add_argument("--timeout", type=float, default=600.0, help="evaluation limit (s)")
    options.add_arguments(serve, "serve")  # the contract's options (engine/grading/options.py)
    serve.add_argument(
        "--max-queue",
        type=int,
        default=None,
        help="answer 503 when this many requests already wait",
    )
    serve.add_argument(
        "--cold",
        action="store_true",
        help="start a fresh worker per evaluation instead of forking a warm one",
    )
    serve.set_defaults(func=handle_serve)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def parse_gpus(text: str) -> list[int] | str | None:
    if text == "auto":
        return "auto"
    if text in ("none", "cpu", ""):
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--gpus must be auto, none or a list like 0,1 (got {text!r})") from None


def handle_serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from engine.grading.backends.http_server import is_loopback, start_server
    from engine.grading.backends.local import LocalBackend
    from engine.grading.options import EvalConfig

    token = args.token or os.environ.get("MKB_GRADER_TOKEN") or None
    try:
        gpus = parse_gpus(args.gpus)
    except ValueError as exc:
        print(f"mkb: error: {exc}", file=sys.stderr)
        return 2
    if not token and not is_loopback(args.host):
        print(
            f"mkb: error: a --token (or MKB_GRADER_TOKEN) is required to listen on {args.host}",
            file=sys.stderr,
        )
        return 2

    async def serve() -> None:
        backend = LocalBackend(
            gpus=gpus,
            preview_slots=args.preview_slots,
            config=EvalConfig(timeout_s=args.timeout, **options.from_args(args, "serve")),
            warm=not args.cold,
        )
        await backend.start()
        runner, port = await start_server(backend, args.host, args.port, token, args.max_queue)
        status = backend.status()
        print(
            f"mkb grader: {status['device']} slots {', '.join(status['slots'])} on "
            f"http://{args.host}:{port} (auth {'on' if token else 'off'})",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 0
    return 0
