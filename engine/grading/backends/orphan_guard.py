"""Kill what a grading process started when it dies, whatever session its children lead.

A grader actor's warm parent leads its own session, and so do its judges and the jail
(``bwrap --new-session``); a cluster engine that cleans up a dead worker by process group
never sees them. The jailed runners die with their parent (``--die-with-parent``), but the
warm parent and a judge in the middle of a job would live on. So the actor starts this guard
(``python -m engine.grading.backends.orphan_guard PID``): it keeps a fresh list of the
watched process's descendants (found through ``/proc``, not process groups) and, once the
watched process is gone (its end of the guard's stdin closes), freezes and kills every one
of them, then exits. It holds no secrets and runs nothing it is sent.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable

from engine.grading.judge.runner_proc import process_tree

POLL_S = 0.5


def descendants(pid: int) -> set[int]:
    """``pid``'s descendants (not ``pid`` itself), as ``/proc`` shows them now."""
    return set(process_tree(pid)) - {pid}


def kill_all(pids: Iterable[int]) -> set[int]:
    """Stop, then kill, ``pids`` and everything they started meanwhile; returns the pids hit."""
    hit: set[int] = set()
    pending = set(pids)
    while pending:  # stop first, so nobody forks a child after we looked
        for pid in pending:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        hit |= pending
        pending = {c for pid in pending for c in descendants(pid)} - hit
    for pid in hit:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return hit


def started(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def watch(pid: int, control: int = 0, poll_s: float = POLL_S) -> set[int]:
    """Follow ``pid``'s descendants until ``control`` reads end of input; kill them then."""
    me = os.getpid()
    known: dict[int, str] = {}
    while True:
        for child in descendants(pid) - {me} - set(known):
            stamp = started(child)
            if stamp is not None:
                known[child] = stamp
        known = {p: t for p, t in known.items() if started(p) == t}  # gone, or pid reused
        readable, _, _ = select.select([control], [], [], poll_s)
        if readable and not os.read(control, 4096):
            return kill_all(p for p, t in known.items() if started(p) == t)


class OrphanGuard:
    """Starts and stops the guard of the current process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine.grading.backends.orphan_guard", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a cleanup of our process group must not take it too
            close_fds=True,
        )

    def stop(self) -> None:
        """Close the guard's input (it kills what is left and exits) and reap it."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.proc = None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m engine.grading.backends.orphan_guard PID", file=sys.stderr)
        return 2
    watch(int(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
