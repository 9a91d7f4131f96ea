"""A SIGKILLed engine leaves no grading behind: its warm parent, the judge and the jailed
runner of the grading in progress all die with it (PR_SET_PDEATHSIG down the chain), so a
resumed run never shares the GPU with a grading nobody waits for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.grading.judge.runner_proc import process_tree

ROOT = Path(__file__).resolve().parents[2]
BACKEND = Path(__file__).parent / "fixtures" / "orphans" / "backend_mid_grading.py"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_sigkilled_backend_takes_the_grading_in_progress_along() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    backend = subprocess.Popen(
        [sys.executable, str(BACKEND)], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        assert backend.stdout is not None
        assert backend.stdout.readline().startswith("started")
        deadline = time.monotonic() + 120
        tree: list[int] = []
        while time.monotonic() < deadline:  # until the submission sleeps in its jailed runner
            tree = process_tree(backend.pid)
            cmds = [Path(f"/proc/{p}/cmdline").read_bytes() for p in tree if alive(p)]
            # a fresh runner, or a template's child (bwrap, the template and its child name it)
            fresh = any(b"/mkb-runner/loop.py" in c for c in cmds)
            forked = sum(b"/mkb-runner/template.py" in c for c in cmds) >= 3
            if (fresh or forked) and len(tree) >= 5:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the grading never reached its runner: {tree}")
        time.sleep(2)  # the submission is imported and sleeping in solve
        tree = process_tree(backend.pid)
    finally:
        backend.send_signal(signal.SIGKILL)
        backend.wait()
    descendants = [p for p in tree if p != backend.pid]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(p) for p in descendants):
        time.sleep(0.2)
    left = [p for p in descendants if alive(p)]
    for pid in left:  # do not leave them to the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after the engine's SIGKILL: {left}"


def test_die_with_parent_exits_at_once_when_the_parent_is_already_gone() -> None:
    probe = (
        "import os, sys; sys.path.insert(0, sys.argv[1]);"
        "from engine.grading.processes import die_with_parent;"
        "die_with_parent(os.getppid() + 1 if os.getppid() > 1 else 2); print('ran on')"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 70 and "ran on" not in done.stdout
    supported = "import sys; sys.path.insert(0, sys.argv[1]);" + (
        "from engine.grading.processes import die_with_parent; print(die_with_parent())"
    )
    done = subprocess.run(
        [sys.executable, "-c", supported, str(ROOT)], capture_output=True, text=True
    )
    assert done.stdout.strip() == "True"  # supported here (Linux)
