"""`mkb`: the command-line entry point.

Subcommands live in :mod:`app.commands`; each module there defines ``register(subparsers)``
that adds its parser and sets ``func`` (a callable taking the parsed arguments and returning
an exit code) and raises :class:`app.errors.UsageError` for input the user must fix: commands
never import this module, which imports them. Exit codes: 0 success, 1 a failed check or
verdict, 2 a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import app.commands
from app.errors import UsageError

__all__ = ["UsageError", "build_parser", "main"]  # UsageError: its old home, still importable


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mkb",
        description="MetaKernelBench: cross-DSL skill-transfer experiments on GPU kernels.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(app.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"app.commands.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from app.dotenv import load_dotenv
    from app.third_party import use_bundled_model_costs

    load_dotenv()  # model keys for real runs; the environment wins over the file
    use_bundled_model_costs()  # before anything imports litellm: no download, no retries
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        default = getattr(app.commands, "default_command", None)
        if default is None:
            parser.print_help()
            return 0
        return int(default())
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        print(f"mkb: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mkb: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # run the module under its package name so command handlers and this dispatcher share
    # one UsageError class (``python -m app.cli`` would otherwise load this file twice)
    from app.cli import main as package_main

    sys.exit(package_main())
