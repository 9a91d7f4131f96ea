"""The browser view in a real browser: `mkb tui --serve` on the seeded store, loaded in the
system Chromium (Debian's `chromium` package; Playwright's own browser download is never used)
driven headless by Playwright, read back as text and driven with keys.

textual-serve draws the terminal with xterm.js on a WebGL / 2D canvas, so the page holds no
text to read. xterm.js mirrors the screen into a DOM tree (`.xterm-accessibility-tree`, one
element per row) when its screen-reader mode is on; the test serves textual-serve's own
bundle with that one option added and reads those rows. Everything else (the page, the
websocket, the app process per tab, key handling) is what a user's browser gets.

Skipped only where Chromium or Playwright is genuinely absent; with MKB_REQUIRE_BROWSER=1
(set by `.ci/run`) a missing browser fails instead. `MKB_CHROMIUM` names another binary.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("MKB_REQUIRE_BROWSER", "") not in ("", "0")
# textual-serve 1.1.3's bundle builds its xterm.js Terminal with these options; the test adds
# screenReaderMode right after them (a changed bundle fails loudly, never silently).
XTERM_OPTIONS = "scrollback:0,"
ROWS = ".xterm-accessibility-tree"
TIMEOUT_MS = 30_000


def _unavailable(reason: str) -> NoReturn:
    if REQUIRED:
        pytest.fail(f"MKB_REQUIRE_BROWSER is set but {reason}")
    pytest.skip(reason)


@pytest.fixture
def chromium() -> str:
    """The system Chromium's path (checked before anything is started)."""
    path = os.environ.get("MKB_CHROMIUM") or shutil.which("chromium")
    if not path:
        _unavailable(
            "the system Chromium is not installed (apt-get install -y chromium, or "
            "set MKB_CHROMIUM to a Chromium binary)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(seeded_db: Path, tmp_path: Path) -> Iterator[str]:
    """`mkb tui --serve` on a copy of the seeded store; yields the page's URL."""
    port = _free_port()
    log = (tmp_path / "serve.log").open("wb")  # a file, not a pipe nobody drains
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "tui", "--serve", str(port), "--db", str(seeded_db)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                out = (tmp_path / "serve.log").read_text(errors="replace")
                raise AssertionError(f"mkb tui --serve exited {proc.returncode}:\n{out}")
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        # the server stops its app processes on SIGTERM; the group catches any it leaves
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _route(route: Any) -> None:
    """Serve only the local server (the page's Google Fonts link is cut: CI is offline, and a
    hanging stylesheet would hold up the page's load event); switch on xterm's DOM mirror."""
    url: str = route.request.url
    if not url.startswith("http://127.0.0.1:"):
        route.abort()
    elif url.endswith("/textual.js"):
        response = route.fetch()
        body = response.text()
        assert XTERM_OPTIONS in body, "textual-serve's bundle changed: update XTERM_OPTIONS"
        route.fulfill(
            response=response,
            body=body.replace(XTERM_OPTIONS, XTERM_OPTIONS + "screenReaderMode:!0,", 1),
        )
    else:
        route.continue_()


@pytest.mark.slow
def test_browser_view_renders_and_takes_keys(chromium: str, served: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(TIMEOUT_MS)
            page.route("**/*", _route)
            page.goto(served)
            rows = page.locator(ROWS)

            def shows(*texts: str) -> None:
                for text in texts:
                    expect(rows).to_contain_text(text, timeout=TIMEOUT_MS)

            # the Attempts screen of the read-only attach view, with the seeded rows
            shows("17 attempts", "model-a", "model-b", "solo_cute", "cute2tirx_skill")
            shows("(attached, read-only)")  # the served view never owns the store

            page.locator(".xterm-helper-textarea").focus()
            page.keyboard.press("?")  # help for the screen on display
            shows("Keys: Attempts", "Quit")
            page.keyboard.press("Escape")
            expect(rows).not_to_contain_text("Keys: Attempts", timeout=TIMEOUT_MS)
            shows("17 attempts")

            page.keyboard.press("2")  # the Lift screen (a CPU-graded experiment: PREVIEW)
            shows("PREVIEW")
            expect(rows).not_to_contain_text("17 attempts", timeout=TIMEOUT_MS)
            page.keyboard.press("F1")
            shows("Keys: Lift")
        finally:
            browser.close()
