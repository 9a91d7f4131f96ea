"""Time to first frame of `mkb demo` (and `mkb tui`) in a real terminal.

Starts the command in a detached tmux session (120×36) on a fresh database in a temporary
folder, polls ``tmux capture-pane`` every 20 ms until the App's title bar
(``MetaKernelBench``) is on screen, then quits it with ``ctrl+q`` (the demo's engine is
stopped at once; nothing is left running). The clock starts just before ``tmux new-session``,
so the figure includes interpreter start-up and imports.

Prints one JSON object: seconds to the first frame per run, min / median / max.

    .venv/bin/python benchmarks/first_paint.py [--runs 5] [--command demo|tui]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "MetaKernelBench"


def tmux(socket: str, *args: str) -> str:
    result = subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20, check=False
    )
    return result.stdout


def command_line(which: str, db: Path, done: Path) -> str:
    args = ["demo", "--db", str(db)] if which == "demo" else ["tui", "--create", "--db", str(db)]
    argv = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "app.cli", *args])
    return f"cd {shlex.quote(str(ROOT))} && {argv}; echo $? > {shlex.quote(str(done))}"


def first_paint(which: str, timeout: float) -> float:
    """Seconds from launching the command to the title bar on screen."""
    socket = f"mkb-paint-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="mkb-paint-") as tmp:
        done = Path(tmp) / "exit-code"
        started = time.perf_counter()
        tmux(
            socket,
            "new-session",
            "-d",
            "-s",
            "mkb",
            "-x",
            "120",
            "-y",
            "36",
            command_line(which, Path(tmp) / "mkb.sqlite", done),
        )
        try:
            while MARKER not in tmux(socket, "capture-pane", "-p", "-t", "mkb"):
                if time.perf_counter() - started > timeout:
                    raise SystemExit(f"no frame within {timeout} s")
                time.sleep(0.02)
            elapsed = time.perf_counter() - started
            tmux(socket, "send-keys", "-t", "mkb", "C-q")
            deadline = time.monotonic() + 60
            while not done.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            tmux(socket, "kill-server")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--command", choices=("demo", "tui"), default="demo")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is required (apt-get install -y tmux)")
    samples = [first_paint(args.command, args.timeout) for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "command": f"mkb {args.command}",
                "seconds": [round(s, 2) for s in samples],
                "min": round(min(samples), 2),
                "median": round(statistics.median(samples), 2),
                "max": round(max(samples), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
