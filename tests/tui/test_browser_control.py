"""The browser view acts only with its control token, in a real browser (as
``test_browser.py``: the system Chromium driven by Playwright, the page's rows read from
xterm's DOM mirror): served without ``--control`` an action is refused and logged; served
with it, a tab that gives the printed token excludes an attempt."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_browser import ROWS, TIMEOUT_MS, _free_port, _route, chromium  # noqa: F401

from storage import controls
from storage.db import open_db

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serving(db: Path, log_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    port = _free_port()
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "tui", "--serve", str(port), "--db", str(db), *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text(errors="replace")
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
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _commands(db: Path) -> list[controls.Command]:
    conn = open_db(db, readonly=True)
    try:
        return controls.for_experiment(conn, "tui-test")
    finally:
        conn.conn.close()


def _exclude(browser, url: str, token: str | None) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    page.route("**/*", _route)
    page.goto(url)
    rows = page.locator(ROWS)
    expect(rows).to_contain_text("17 attempts", timeout=TIMEOUT_MS)
    page.locator(".xterm-helper-textarea").focus()
    page.keyboard.press("-")  # exclude the attempt under the cursor
    expect(rows).to_contain_text("Exclude attempt", timeout=TIMEOUT_MS)
    page.keyboard.type("found a hole")
    if token is not None:
        page.keyboard.press("Tab")
        page.wait_for_timeout(500)  # the focus moves to the token field
        page.keyboard.type(token, delay=20)
    page.keyboard.press("Enter")


def _wait(db: Path, n: int) -> list[controls.Command]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if len(found := _commands(db)) >= n:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{n} commands never written")


@pytest.mark.slow
def test_browser_actions_need_the_control_token(
    chromium: str, seeded_db: Path, tmp_path: Path  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            with serving(seeded_db, tmp_path / "ro.log") as url:
                _exclude(browser, url, None)
                refused = _wait(seeded_db, 1)[0]
            assert refused.state == "refused" and "read-only" in refused.outcome
            assert refused.actor.startswith("browser session")
            with serving(seeded_db, tmp_path / "rw.log", "--control") as url:
                found = None
                for _ in range(100):
                    text = (tmp_path / "rw.log").read_text(errors="replace")
                    if found := re.search(r"control token .*: (\S+)", text):
                        break
                    time.sleep(0.1)
                assert found, text
                _exclude(browser, url, found.group(1))
                applied = _wait(seeded_db, 2)[1]
            assert (applied.action, applied.state) == ("exclude", "applied"), (
                applied.outcome, applied.reason)
            assert applied.reason == "found a hole"
        finally:
            browser.close()
