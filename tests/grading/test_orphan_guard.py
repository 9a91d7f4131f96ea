"""The orphan guard: when a grader process is SIGKILLed, what it started in sessions of its
own (as the warm parent, its judges and the jail are) dies too; without the guard it lives on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a stand-in for a grader actor: maybe a guard, then a child leading its own session
GRADER = """
import subprocess, sys, time
from engine.grading.backends.orphan_guard import OrphanGuard
if sys.argv[1] == "guard":
    OrphanGuard().start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _grader_and_child(mode: str) -> tuple[subprocess.Popen[str], int]:
    grader = subprocess.Popen(
        [sys.executable, "-c", GRADER, mode], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert grader.stdout is not None
    child = int(grader.stdout.readline())
    time.sleep(1.0)  # the guard has looked at the tree at least once
    return grader, child


def test_a_killed_graders_session_leaders_die_with_it() -> None:
    grader, child = _grader_and_child("guard")
    assert _alive(child)
    grader.send_signal(signal.SIGKILL)
    grader.wait()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the guard did not kill the orphaned child"


def test_without_the_guard_the_child_outlives_its_grader() -> None:
    grader, child = _grader_and_child("none")
    try:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
        time.sleep(1.0)
        assert _alive(child)  # what the guard is for
    finally:
        os.kill(child, signal.SIGKILL)
