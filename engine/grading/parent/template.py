"""The warm parent's side of a runner template (:mod:`engine.grading.runner.template`).

A template is one jailed process, the jail's PID 1, that imports torch and the DSLs once and
forks one fresh runner per evaluation inside its jail. The warm parent asks for a runner with
``fork``, handing over that evaluation's runner socket, bypass page and log; the template
empties its jail first (every process killed, every writable place emptied) and answers with
the child's pid, which the parent maps to the host's. The runner it gets back is a
:class:`RunnerProcess` like a fresh one, whose memory watchdog and kill cover the template's
whole tree less the template. A template that fails a step is closed: the next evaluation gets
a new jail (:class:`TemplateSource` starts one), or, after repeated failures, a fresh runner.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.grading.judge.runner_proc import (
    JAIL_WORKDIR,
    RunnerOptions,
    RunnerProcess,
    jailed_command,
    process_tree,
    runner_scratch,
    start_zone_process,
    zone_args,
)
from engine.grading.runner.channel import receive, send

TEMPLATE_MAIN = "template.py"
READY_TIMEOUT_S = 300.0
FORK_TIMEOUT_S = 60.0
MAX_FAILURES = 3  # templates that failed in a row before the slot goes back to fresh runners


class TemplateFailed(RuntimeError):
    """The template did not start, answer or fork."""


def ns_pid(pid: int) -> int | None:
    """``pid``'s id in its innermost PID namespace (``NSpid``'s last field)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


class RunnerTemplate:
    """One started template: its control socket, its host pid, its scratch folder."""

    def __init__(self, options: RunnerOptions) -> None:
        if not options.jail:
            raise TemplateFailed("a template runs only in a jail (its PID 1 is a trust point)")
        self.options = options
        self.scratch = runner_scratch()
        ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ctl = ctl
        args = ["--ctl-fd", str(theirs.fileno()), "--workdir", JAIL_WORKDIR]
        keep = [theirs.fileno()]
        argv, cwd, env = jailed_command(
            options, self.scratch, TEMPLATE_MAIN, args + zone_args(options), keep, template=True
        )
        self.popen = start_zone_process(
            argv, cwd, env, keep, Path(self.scratch) / "template.log"
        )
        theirs.close()
        self.pid: int | None = None  # the template's host pid, once ready
        self.ready: dict[str, Any] = {}

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        ready, _, _ = select.select([self.ctl], [], [], timeout_s)
        if not ready:
            raise TemplateFailed("the template did not answer in time")
        try:
            message, fds = receive(self.ctl)
        except (EOFError, OSError, ValueError) as exc:
            raise TemplateFailed(f"the template closed its socket: {self.log_tail()}") from exc
        for fd in fds:
            os.close(fd)
        return message

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        if self.ready:
            return
        message = self._receive(timeout_s)
        if message.get("op") != "ready":
            raise TemplateFailed(f"the template sent {str(message)[:200]}")
        self.pid = self._host_pid(1)
        if self.pid is None:
            raise TemplateFailed("the template's host pid was not found")
        self.ready = message

    def _host_pid(self, inner: int) -> int | None:
        """The host pid of the jail's process ``inner`` (the template is inner pid 1)."""
        root = self.pid if self.pid is not None else self.popen.pid
        for pid in process_tree(root):
            if pid != self.popen.pid and ns_pid(pid) == inner:
                return pid
        return None

    def fork(self) -> RunnerProcess:
        """A fresh runner forked inside the jail, emptied first; not yet ready."""
        self.wait_ready()
        judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        switch_fd = os.memfd_create("mkb-bypass")
        os.ftruncate(switch_fd, mmap.PAGESIZE)
        switch = mmap.mmap(switch_fd, mmap.PAGESIZE)
        scratch = tempfile.mkdtemp(prefix="mkb-runner-")  # this evaluation's log only
        log = os.open(Path(scratch) / "runner.log", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            send(self.ctl, {"op": "fork"}, [runner_end.fileno(), switch_fd, log])
            reply = self._receive(FORK_TIMEOUT_S)
        except (OSError, TemplateFailed):
            judge_end.close()
            switch.close()
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        finally:
            runner_end.close()
            os.close(switch_fd)
            os.close(log)
        host = self._host_pid(int(reply.get("pid", 0))) if reply.get("op") == "forked" else None
        if host is None:
            judge_end.close()
            switch.close()
            shutil.rmtree(scratch, ignore_errors=True)
            raise TemplateFailed(f"the template did not fork: {str(reply)[:200]}")
        proc = RunnerProcess(judge_end, host, switch, None, self.options.device)
        proc.scratch = scratch
        proc.workdir = str(Path(self.scratch) / "work")  # the jail's, emptied at the next fork
        proc.template_pid = self.pid
        return proc

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        from engine.grading.processes import read_tail

        return read_tail(Path(self.scratch) / "template.log", chars)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.ctl.close()  # the template exits on end of input; the jail dies with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        shutil.rmtree(self.scratch, ignore_errors=True)


class TemplateSource:
    """The slot's template, started on first use and replaced when it fails (a new jail);
    after :data:`MAX_FAILURES` failures in a row it gives up (the judge starts fresh runners)."""

    def __init__(self, options: RunnerOptions) -> None:
        self.options = options
        self.template: RunnerTemplate | None = None
        self.failures = 0
        self.forks = 0
        self.fork_s = 0.0  # the last fork's wall time (emptying the jail included)

    def start(self) -> None:
        """Start the template now (its imports overlap whatever the parent does next)."""
        if self.template is None and self.failures < MAX_FAILURES:
            try:
                self.template = RunnerTemplate(self.options)
            except Exception:  # noqa: BLE001 - counted; the judge starts a fresh runner
                self.failures += 1

    def fork(self) -> RunnerProcess | None:
        start = time.monotonic()
        self.start()
        if self.template is None:
            return None
        try:
            runner = self.template.fork()
        except Exception:  # noqa: BLE001 - a new jail next time
            self.failures += 1
            self.template.close()
            self.template = None
            return None
        self.failures = 0
        self.forks += 1
        self.fork_s = round(time.monotonic() - start, 4)
        return runner

    def close(self) -> None:
        if self.template is not None:
            self.template.close()
            self.template = None
