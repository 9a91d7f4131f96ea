"""An imported public MetaKernelBench run opens in the TUI in a real terminal (tmux):
its attempts, one attempt's imported trajectory, and the Lift view."""

from __future__ import annotations

import shlex
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_tmux_smoke import ROOT, Tmux

sys.path.insert(0, str(ROOT / "tests" / "imports"))
import run_fixtures  # noqa: E402

from app.cli import main  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (CI: apt-get install -y tmux)"
)


@pytest.mark.slow
def test_an_imported_run_opens_in_the_tui(tmp_path: Path) -> None:
    run = run_fixtures.build_mkb_run(tmp_path / "results" / "kernel-model-1")
    db = tmp_path / "imported.sqlite"
    assert main(["import", "mkb-run", str(run), "--db", str(db)]) == 0
    tmux = Tmux(f"mkb-import-{uuid.uuid4().hex[:8]}")
    done = tmp_path / "exit-code"
    command = (
        f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m app.cli tui "
        f"--db {shlex.quote(str(db))}; echo $? > {shlex.quote(str(done))}"
    )
    tmux.run("new-session", "-d", "-s", "mkb", "-x", "140", "-y", "36", command)
    try:
        tmux.wait_for("mkb-run-openrouter-acme-kernel-model-1", "15 attempts", "solo_cute")
        time.sleep(0.5)  # let the terminal settle before the first key
        tmux.run("send-keys", "-t", "mkb", "Enter")  # open the first attempt
        tmux.wait_for("Trajectory", "cat problem.py")
        tmux.run("send-keys", "-t", "mkb", "Escape")
        time.sleep(0.5)  # a lone Escape followed fast by "2" reads as alt+2
        tmux.run("send-keys", "-t", "mkb", "2")
        tmux.wait_for("Attention", "MLP & Norm")
        tmux.run("send-keys", "-t", "mkb", "C-q")
        deadline = time.monotonic() + 20
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists() and done.read_text().strip() == "0"
    finally:
        tmux.run("kill-server")
