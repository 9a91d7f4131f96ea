"""Supervising a real run from a second terminal: `mkb run` of a scripted agent (the real
Terminus-2 agent in the local sandbox, graded by the simulated grader: the subject is the
supervision, and real gradings are covered by tests/engine/test_demo.py) in one tmux
pane, `mkb tui --attach` in another, all four actions on one attempt of one experiment. Both
attempts have no submission budget (`max_submissions = 0`) and their scripted model sends its
`submit` again while it is refused at that limit: stop ends a running attempt within 2 s (its
sandbox gone, nothing orphaned), retry runs a linked new try, extend lets that try pass the
budget it hit (a submission graded after refusals at the limit), exclude changes
`mkb analyze --json`; the other attempt is then stopped from the shell (`mkb attempt stop`).
Two gradings in all (the extended submission and its final evaluation): mostly waiting, so it
runs in the parallel tier in its own xdist group. Skipped where tmux is absent."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage import controls, queries
from storage.db import StorageError, open_db

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.slow,  # started first on its worker (tests/conftest.py), left out of test-fast
    pytest.mark.xdist_group("tmux_supervise"),  # mostly waiting: overlaps other tests
]
CONFIG = """
[experiment]
name = "supervised"
id = "supervised"
problems = ["p28"]
dsls = ["cute"]
replicates = 2
budget_minutes = 10
max_submissions = 0
sandbox = "local"
grading = "simulated"

[control]
max_extra_submissions = 1

[[models]]
name = "openai/scripted-demo"
scenario = "{scenario}"

[models.model_info]
max_input_tokens = 200000
max_output_tokens = 8000
input_cost_per_token = 0.0
output_cost_per_token = 0.0

[concurrency]
sandboxes = 2
attempts_per_model = 2
grading_slots = 1
"""
# write a solution and submit it, again while refused at the limit, until it is graded
SCENARIO = """
name = "refused-until-extended"
[[turns]]
analysis = "Write the eager solution and submit it."
commands = [{ keystrokes = '''cat > solution.py << 'PYEOF'
import torch


def solve(hidden_states, residual, weight):
    s = hidden_states.float() + residual.float()
    inv = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
    return (s * inv * weight.float()).to(hidden_states.dtype)
PYEOF
submit solution.py
''', duration = 1.5 }]
repeat_until = "Feedback for submission 1"

[[turns]]
analysis = "Graded."
task_complete = true
"""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _sandbox_bwrap(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return cmd.startswith(b"bwrap") and b"mkb-jail-ready" in cmd


def sandboxes(pids: set[int]) -> set[int]:
    """The agent sandboxes among ``pids``: their outer bwrap (bwrap runs the sandbox in a
    child bwrap with the same command line)."""
    tree = _children()
    parent = {child: ppid for ppid, kids in tree.items() for child in kids}
    return {p for p in pids if _sandbox_bwrap(p) and not _sandbox_bwrap(parent.get(p, 0))}


class Panes:
    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.tui = ""  # the TUI pane's id (the run's pane closes when the run ends)

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, timeout=20).stdout

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.run("send-keys", "-t", self.tui, *(["-l"] if literal else []), *keys)

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.run("capture-pane", "-p", "-t", self.tui):
                return
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared:\n"
                             + self.run("capture-pane", "-p", "-t", self.tui))


def rows(db: Path) -> list[queries.AttemptRow]:
    try:
        conn = open_db(db, readonly=True)
    except StorageError:  # the run is still creating it
        return []
    try:
        return queries.attempts_for_experiment(conn, "supervised")
    except sqlite3.Error:  # still being migrated
        return []
    finally:
        conn.conn.close()


def commands(db: Path) -> list[controls.Command]:
    conn = open_db(db, readonly=True)
    try:
        return controls.for_experiment(conn, "supervised")
    finally:
        conn.conn.close()


def until(condition, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def claim_times(db: Path) -> str:
    """When each command was written, claimed and ended (its events), for a failure."""
    conn = open_db(db, readonly=True)
    try:
        found = conn.execute(
            "SELECT created_at, payload_json FROM events WHERE kind = ? ORDER BY id",
            [controls.EVENT_KIND]).fetchall()
    finally:
        conn.conn.close()
    return "; ".join(f"{json.loads(p)['state']} {at[11:23]}" for at, p in found)


def act(panes: Panes, key: str, reason: str) -> None:
    """Press an action key on the attempt shown, type the reason, confirm."""
    panes.keys(key, literal=True)  # "-" is not a tmux key name: sent as text
    panes.wait_for("?")  # the dialog's title: "Stop attempt N?"
    time.sleep(0.3)
    panes.keys(reason, literal=True)
    panes.keys("Enter")


def limit_refusals(db: Path, attempt_id: int) -> int:
    """The attempt's submissions refused at its submission limit (their events)."""
    conn = open_db(db, readonly=True)
    try:
        found = conn.execute(
            "SELECT payload_json FROM events WHERE kind = 'submission_rejected' "
            "AND attempt_id = ?", [attempt_id]).fetchall()
    finally:
        conn.conn.close()
    return sum(json.loads(p).get("reason") == "limit" for (p,) in found)


def graded(db: Path, attempt_id: int) -> list[tuple[int, str, int]]:
    """The attempt's stored submissions: (try, purpose, n)."""
    conn = open_db(db, readonly=True)
    try:
        return [tuple(r) for r in conn.execute(
            "SELECT try, purpose, n FROM submissions WHERE attempt_id = ? ORDER BY id",
            [attempt_id]).fetchall()]
    finally:
        conn.conn.close()


def test_stop_retry_extend_and_exclude_from_an_attached_tui(tmp_path: Path) -> None:
    config, db = tmp_path / "supervised.toml", tmp_path / "run.sqlite"
    (tmp_path / "refused.toml").write_text(SCENARIO)
    config.write_text(CONFIG.replace("{scenario}", str(tmp_path / "refused.toml")))
    py, root = shlex.quote(sys.executable), shlex.quote(str(ROOT))
    run = f"cd {root} && {py} -m app.cli run {config} --db {db}; echo $? > {tmp_path}/rc"
    panes = Panes(f"mkb-sup-{os.getpid()}")
    panes.run("new-session", "-d", "-s", "sup", "-x", "120", "-y", "50", run)
    try:
        # the attempts list: the target on the first row (rows in id order), the other below
        target, other = until(lambda: len(rows(db)) == 2 and sorted(r.id for r in rows(db)),
                              120, "the plan stored")
        panes.tui = panes.run("split-window", "-t", "sup", "-v", "-l", "36", "-P", "-F",
                              "#{pane_id}",
                              f"cd {root} && {py} -m app.cli tui --attach --db {db}").strip()
        engine = int(until(lambda: subprocess.run(
            ["pgrep", "-f", f"app.cli run {config}"], capture_output=True, text=True,
        ).stdout.split()[:1], 30, "the engine's pid")[0])
        until(lambda: len(sandboxes(descendants(engine))) == 2, 60, "two sandboxes up")
        panes.wait_for("2 attempts")
        until(lambda: limit_refusals(db, target), 30, "a submission refused at the limit")
        before = descendants(engine)
        act(panes, "X", "loops on one error")
        asked = time.monotonic()
        stop = until(lambda: [c for c in commands(db) if c.state == "applied"], 10, "stop")
        took = time.monotonic() - asked
        after = descendants(engine)
        gone = before - after
        load = os.getloadavg()[0]
        timing = f"stop applied {took:.1f} s after the key, load {load:.1f} ({claim_times(db)})"
        print(timing)
        assert stop[0].action == "stop" and took < 10.0, timing
        if load < (os.cpu_count() or 1):  # the bound, on a machine
            assert took < 2.0, timing  # not shared with heavier work (docs/tui.md)
        assert len(sandboxes(after)) == 1  # the other attempt's sandbox only
        left = [p for p in gone if alive(p)]
        assert gone and not left, "a stopped process outlived it: " + "; ".join(
            f"{p} {Path(f'/proc/{p}/stat').read_text()[:80]!r} "
            f"{Path(f'/proc/{p}/cmdline').read_bytes()[:120]!r}" for p in left if alive(p))
        row = next(r for r in rows(db) if r.id == target)
        assert row.stop_reason == "loops on one error"
        assert graded(db, target) == []  # nothing was graded: every submit was refused

        act(panes, "R", "give it another go")
        until(lambda: len([c for c in commands(db) if c.state == "applied"]) == 2, 10, "retry")
        assert "try 2 queued; try 1 kept" in commands(db)[1].outcome
        in_try_1 = limit_refusals(db, target)
        # the other attempt has kept the engine running until now: stop it (row 2)
        panes.keys("Down")
        act(panes, "X", "not needed")
        until(lambda: len([c for c in commands(db) if c.state == "applied"]) == 3, 10, "stop 2")
        panes.keys("Up")
        until(lambda: limit_refusals(db, target) > in_try_1, 30, "try 2 refused at the limit")
        act(panes, "E", "1")  # the dialog's first field: extra submissions
        until(lambda: len([c for c in commands(db) if c.state == "applied"]) == 4, 10, "extend")
        assert [c.attempt_id for c in commands(db)] == [target, target, other, target]
        act(panes, "-", "found a hole")  # exclusions need no engine: applied when written
        until(lambda: len(commands(db)) == 5, 10, "exclude")
        until(lambda: (tmp_path / "rc").exists(), 180, "the run's end")
        assert (tmp_path / "rc").read_text().strip() == "0"
        # past the budget it hit: one submission graded beyond max_submissions = 0, after
        # refusals at that limit in the same try, then its final evaluation
        assert graded(db, target) == [(2, "submission", 1), (2, "final", 1)]
        finished = next(r for r in rows(db) if r.id == target)
        assert (finished.state, finished.tries, finished.stop_reason) == ("finished", 2, None)
        assert graded(db, other) == []
        report = json.loads(subprocess.run(
            [sys.executable, "-m", "app.cli", "analyze", "--db", str(db), "--json",
             "--draws", "10"], cwd=ROOT, capture_output=True, text=True, timeout=120).stdout)
        assert report["exclusion"]["excluded"] == 1
        assert report["exclusion"]["excluded_reasons"] == {"found a hole": 1}
    finally:
        panes.run("kill-server")
