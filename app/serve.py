"""Serve the attach view in a browser with textual-serve.

textual-serve starts one app process per browser tab, so the served command is always the
``--attach`` view: it tails the database that a separate ``mkb run`` (or ``mkb tui``) writes
and never starts an engine. Bind to loopback and reach it over an SSH tunnel.

It is read-only: an action there is refused and logged (``app/control.py``). With
``control``, a token is printed at start; a tab that gives it may act (its sha256 reaches the
tabs through the environment of the served command, never the token itself).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from app.control import TOKEN_ENV, new_token
from storage.db import open_db, resolve_path

ROOT = Path(__file__).resolve().parents[1]


def served_command(db: str | None, token_sha: str | None = None) -> str:
    """The shell command each browser tab runs."""
    path = resolve_path(db).resolve()
    env = f"{TOKEN_ENV}={token_sha} " if token_sha else ""
    return (f"cd {shlex.quote(str(ROOT))} && {env}{shlex.quote(sys.executable)} -m app.cli "
            f"tui --browser --db {shlex.quote(str(path))}")


def serve(db: str | None, host: str = "127.0.0.1", port: int = 8000, *,
          control: bool = False) -> None:
    """Run the textual-serve web server until interrupted."""
    try:
        from textual_serve.server import Server
    except ImportError as exc:
        raise RuntimeError(
            "textual-serve is not installed: pip install textual-serve (it needs aiohttp and "
            "aiohttp-jinja2)") from exc
    open_db(resolve_path(db), readonly=True).conn.close()  # fail now on a missing/bad file
    token_sha = None
    if control:
        token, token_sha = new_token()
        print(f"control token (a browser tab asks for it on its first action): {token}",
              flush=True)
    title = "MetaKernelBench" + ("" if control else " (read-only)")
    Server(served_command(db, token_sha), host=host, port=port, title=title).serve()
