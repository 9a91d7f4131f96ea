"""A real-terminal smoke test: `mkb tui` in tmux, driven with send-keys, read with
capture-pane. Skipped where tmux is absent (CI: `apt-get install -y tmux`)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (CI: apt-get install -y tmux)")


class Tmux:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def run(self, *args: str) -> str:
        result = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                                text=True, timeout=20)
        return result.stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "mkb")

    def wait_for(self, *texts: str, timeout: float = 30.0) -> str:
        """Wait until every text is on screen at once (the status line can paint before
        the table rows do, so one marker is not enough)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.screen()
            if all(text in shown for text in texts):
                return shown
            time.sleep(0.2)
        raise AssertionError(f"{texts!r} never all appeared; screen was:\n{self.screen()}")


def test_tui_in_a_real_terminal(seeded_db: Path, tmp_path: Path) -> None:
    tmux = Tmux(f"mkb-test-{uuid.uuid4().hex[:8]}")
    done = tmp_path / "exit-code"
    command = (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m app.cli tui "
               f"--db {shlex.quote(str(seeded_db))}; echo $? > {shlex.quote(str(done))}")
    tmux.run("new-session", "-d", "-s", "mkb", "-x", "120", "-y", "36", command)
    try:
        tmux.wait_for("17 attempts", "model-a", "solo_cute")
        time.sleep(0.5)  # let the terminal settle (first keys can race the startup queries)
        tmux.run("send-keys", "-t", "mkb", "/")
        time.sleep(0.2)
        tmux.run("send-keys", "-t", "mkb", "-l", "state:running")
        tmux.wait_for("1 attempts", "model-b", "running")
        tmux.run("send-keys", "-t", "mkb", "Enter")  # filter → table
        tmux.run("send-keys", "-t", "mkb", "Enter")  # open the attempt
        tmux.wait_for("attempt 17 · model-b · p28", "Trajectory",
                      "no trajectory steps recorded yet")
        tmux.run("send-keys", "-t", "mkb", "Escape")
        time.sleep(0.5)  # a lone Escape followed fast by "2" reads as alt+2 in a terminal
        tmux.run("send-keys", "-t", "mkb", "2")
        tmux.wait_for("PREVIEW")
        tmux.run("send-keys", "-t", "mkb", "C-q")
        deadline = time.monotonic() + 20
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists() and done.read_text().strip() == "0"
    finally:
        tmux.run("kill-server")
