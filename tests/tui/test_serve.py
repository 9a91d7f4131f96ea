"""`mkb tui --serve PORT`: textual-serve serves the read-only attach view over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from storage.db import open_db

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_answers_with_the_app_page(tmp_path: Path) -> None:
    db = tmp_path / "served.sqlite"
    open_db(db).conn.close()
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "tui", "--serve", str(port), "--db", str(db)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        page = b""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    assert resp.status == 200
                    page = resp.read()
                    break
            except OSError:
                time.sleep(0.5)
        assert b"MetaKernelBench" in page or b"textual" in page.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_serve_refuses_a_missing_database(tmp_path: Path) -> None:
    from app.cli import main

    assert main(["tui", "--serve", str(_free_port()), "--db", str(tmp_path / "none.sqlite")]) == 2
