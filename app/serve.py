"""Serve the read-only attach view in a browser with textual-serve.

textual-serve starts one app process per browser tab, so the served command is always the
``--attach`` view: it tails the database that a separate ``mkb run`` (or ``mkb tui``) writes
and never starts an engine. Bind to loopback and reach it over an SSH tunnel.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from storage.db import open_db, resolve_path

ROOT = Path(__file__).resolve().parents[1]


def served_command(db: str | None) -> str:
    """The shell command each browser tab runs."""
    path = resolve_path(db).resolve()
    return (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m app.cli tui "
            f"--attach --db {shlex.quote(str(path))}")


def serve(db: str | None, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the textual-serve web server until interrupted."""
    try:
        from textual_serve.server import Server
    except ImportError as exc:
        raise RuntimeError(
            "textual-serve is not installed: pip install textual-serve (it needs aiohttp and "
            "aiohttp-jinja2)") from exc
    open_db(resolve_path(db), readonly=True).conn.close()  # fail now on a missing/bad file
    Server(served_command(db), host=host, port=port,
           title="MetaKernelBench (read-only)").serve()
