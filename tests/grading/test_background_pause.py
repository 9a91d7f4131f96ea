"""What the warm parent started ahead is stopped while its judge times calls, then let go."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.grading.judge.job import Channel
from engine.grading.parent.supervise import Limits
from engine.grading.parent.zygote import (
    BackgroundPause,
    Primed,
    Spares,
    run_supervised,
    started_ahead,
)

TREE = (
    "import subprocess, sys, time;"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
    "time.sleep(60)"
)


def state(pid: int) -> str:
    """The process state letter from /proc (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def start_tree() -> tuple[subprocess.Popen[bytes], int]:
    """A process with one child, like a jailed runner under bubblewrap."""
    parent = subprocess.Popen([sys.executable, "-c", TREE])
    for _ in range(200):
        with open(f"/proc/{parent.pid}/task/{parent.pid}/children") as fh:
            children = fh.read().split()
        if children:
            return parent, int(children[0])
        time.sleep(0.02)
    raise AssertionError("the child process did not start")


def test_quiet_phases_stop_the_whole_tree_and_the_others_let_it_go() -> None:
    parent, child = start_tree()
    try:
        pause = BackgroundPause(lambda: [parent.pid])
        for phase, expected in [
            ("eager", "S"),
            ("eager_timing", "T"),
            ("eager_done", "S"),
            ("import", "S"),
            ("warmup", "T"),
            ("timing", "T"),
            ("bypass", "S"),
        ]:
            pause.phase(phase)
            time.sleep(0.05)
            states = {state(parent.pid), state(child)}
            if expected == "T":
                assert states == {"T"}, phase  # the whole tree stopped
            else:  # let go: sleeping, or running at that instant on a loaded machine
                assert "T" not in states, phase
    finally:
        parent.kill()
        os.kill(child, 9)
        parent.wait()


# the stand-in judge must be a forked child running Python, as the zygote's judges are; it only
# writes to a pipe, sleeps and reads /proc, so the threads the test process may hold (other
# tests' stores) cannot deadlock it: the fork-with-threads warning says nothing here
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_the_judge_times_calls_while_what_was_started_ahead_is_stopped(tmp_path: Path) -> None:
    spare, spare_child = start_tree()
    nonce = "n" * 32
    read_fd, write_fd = os.pipe()
    judge = os.fork()
    if judge == 0:  # a stand-in judge: announces timing, looks at the spare, reports
        os.close(read_fd)
        channel = Channel(write_fd, nonce)
        channel.send("phase", "timing")
        time.sleep(0.3)
        channel.send("result", {"spare": state(spare.pid), "its_child": state(spare_child)})
        os._exit(0)
    os.close(write_fd)
    sent: list[dict[str, Any]] = []
    job = {"nonce": nonce, "workdir": str(tmp_path)}
    try:
        run_supervised(
            judge,
            read_fd,
            job,
            Limits(timeout_s=30, eager_timeout_s=30),
            Spares(None),
            sent.append,
            BackgroundPause(lambda: [spare.pid]),
        )
        result = sent[-1]["outcome"]["result"]
        assert result == {"spare": "T", "its_child": "T"}
        assert state(spare.pid) != "T" and state(spare_child) != "T"  # let go afterwards
    finally:
        spare.kill()
        os.kill(spare_child, 9)
        spare.wait()


def test_started_ahead_names_the_spares_the_next_judge_and_the_runner_it_holds() -> None:
    spares = Spares(None)
    spares.pool = [type("Spare", (), {"pid": 11})(), type("Spare", (), {"pid": 12})()]  # type: ignore[list-item]
    primed = Primed(21, -1, -1, None, spare_pid=22)  # type: ignore[arg-type]
    assert started_ahead(spares, primed)() == [11, 12, 21, 22]
    assert started_ahead(spares, None)() == [11, 12]
    spares.pool.pop()
    assert started_ahead(spares, None)() == [11]  # as they are when asked
