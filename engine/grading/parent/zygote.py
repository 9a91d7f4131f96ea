"""The warm parent: imports torch, the catalog and the DSLs once, then forks one judge per job.

Run as ``python -m engine.grading.parent.zygote [--no-dsls] [--spare-device cpu|cuda]``. It never
initialises CUDA (so forked judges can), keeps one submission runner started ahead of the
next job (a fresh jailed process each time, never a fork of this one), and talks JSON lines
on its stdin/stdout with the backend that started it:

* out ``{"kind": "ready", "pid": …, "preloaded": […]}`` once imports are done;
* in ``{"kind": "job", "job": {…}, "limits": {…}}`` → out ``{"kind": "started", "pid": …}``
  then ``{"kind": "outcome", "outcome": {…}}``;
* in ``{"kind": "exit"}`` (or end of input) → exits.

Each child starts a new session, gets /dev/null as stdin and a log file as stdout/stderr,
and reports over its own pipe (see :mod:`engine.grading.parent.supervise`); one job at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.grading.judge import placement
from engine.grading.judge.runner_proc import RunnerOptions, RunnerProcess, process_tree
from engine.grading.parent.template import TemplateSource
from engine.grading.processes import die_with_parent

DSL_MODULES = ("cutlass", "cutlass.cute", "tvm", "tvm_ffi")


def preload(dsls: bool) -> list[str]:
    """Import what every evaluation needs; returns the optional modules that loaded."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import numpy  # noqa: F401
    import torch  # noqa: F401

    # not torch._dynamo (2.4 s of CPU per warm parent on the 2-core dev machine): no judge
    # imports it since submissions run in the runner's process, not the judge's
    import engine.grading.judge.job  # noqa: F401
    import engine.grading.judge.kernel_audit  # noqa: F401
    import engine.grading.judge.timing  # noqa: F401
    import engine.grading.judge.wire  # noqa: F401
    import engine.grading.runner.loop  # noqa: F401
    import problems.compare  # noqa: F401
    import problems.sol  # noqa: F401
    from problems.registry import catalog

    catalog()
    loaded = []
    if dsls:
        for name in DSL_MODULES:
            try:
                importlib.import_module(name)
                loaded.append(name)
            except Exception:  # noqa: BLE001 - optional
                continue
    return loaded


def _isolate(control: Sequence[int], spare: RunnerProcess | None) -> None:
    """In a forked judge: its own session, the warm parent's control pipe closed, the
    standard streams on /dev/null until the job's log is known."""
    parent = os.getppid()
    os.setsid()
    die_with_parent(parent)  # a judge never outlives its warm parent (nor its runner the judge)
    for fd in control:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(devnull, target)
    if spare is not None:
        spare.popen = None  # the warm parent reaps it; this child watches its socket


def _judge(job: dict[str, Any], write_fd: int, spare: RunnerProcess | None, prepared: Any) -> None:
    """In a forked judge: log to the job's folder, work there, judge the job."""
    from engine.grading.judge.job import run_job

    log = os.open(Path(job["workdir"]) / "worker.log", os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(job["workdir"])
    run_job(job, write_fd, spare, prepared)


def _exit_after(body: Callable[[], None]) -> None:
    """Run ``body`` in a forked child and exit without returning (70 if it raised)."""
    code = 0
    try:
        body()
    except BaseException:  # noqa: BLE001
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_child(
    job: dict[str, Any], write_fd: int, control: Sequence[int], spare: RunnerProcess | None
) -> None:
    """In the forked child: isolate, redirect, judge, and exit without returning."""

    def body() -> None:
        _isolate(control, spare)
        _judge(job, write_fd, spare, None)

    _exit_after(body)


class Spares:
    """Submission runners started ahead of the next jobs (a fresh process per job, oldest
    first): a runner needs seconds to import torch and the DSLs, a warm evaluation less.

    With a ``template`` (parent/template.py) each is forked from the slot's runner template
    instead, one at a time: a fork empties the template's jail, so the next runner is forked
    only once the job that holds the last one has ended (:meth:`returned`)."""

    def __init__(
        self,
        options: RunnerOptions | None,
        count: int = 1,
        template: TemplateSource | None = None,
        prime_judges: bool = True,
    ) -> None:
        self.options = options
        self.count = max(0, count)
        self.pool: list[RunnerProcess] = []
        self.started: list[int] = []
        self.template = template
        self.prime_judges = prime_judges and options is not None
        self.lent = False  # a template's runner is with a judge

    def refill(self) -> None:
        if self.template is not None:
            if not self.pool and not self.lent:
                runner = self.template.fork()
                if runner is not None:
                    self.pool.append(runner)
            return
        while self.options is not None and len(self.pool) < self.count:
            try:
                spare = RunnerProcess.spawn(self.options)
            except Exception:  # noqa: BLE001 - the judge starts one itself (and says why not)
                return
            self.pool.append(spare)
            self.started.append(spare.pid)

    def take(self, job: dict[str, Any]) -> RunnerProcess | None:
        """The oldest spare if it suits ``job`` (same device, same jail choice), else None."""
        if not self.pool or self.options is None:
            return None
        spare = self.pool.pop(0)
        self.lent = self.template is not None
        suits = job["device"] == self.options.device and (
            bool(job.get("unsafe_no_jail")) != self.options.jail
        )
        if not suits or spare.exited():
            spare.close()
            return None
        return spare

    def after_fork(self, given: RunnerProcess | None) -> None:
        """In the parent: drop our end of the runner the child took."""
        if given is not None:
            with contextlib.suppress(OSError):
                given.sock.close()
            with contextlib.suppress(Exception):
                given.switch.close()
            given.scratch = None  # the child removes it

    def reap(self) -> None:
        for pid in list(self.started):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.started.remove(pid)

    def private_fds(self) -> list[int]:
        """The template's control socket: a forked judge closes it (``_isolate``)."""
        template = self.template.template if self.template is not None else None
        return [template.ctl.fileno()] if template is not None else []

    def returned(self) -> None:
        """The job that held the template's runner has ended."""
        self.lent = False

    def close(self) -> None:
        while self.pool:
            self.pool.pop().close()
        if self.template is not None:
            self.template.close()


# the judge's phases that time calls (the eager reference's, once the judge's own runner is
# ready; the submission's warm-up and timed calls). Not "eager" itself: while the judge waits
# for its runner, the others go on starting.
QUIET_PHASES = frozenset({"eager_timing", "warmup", "timing"})


class BackgroundPause:
    """Stops what this parent started ahead (spare runners importing torch and the DSLs,
    starting CUDA and the profiler; the next job's judge warming CUDA) while the running judge
    times calls, and lets it go on afterwards. Measured on the H200 (2026-12-04): evaluations
    that overlapped a spare's start scored a 65 µs call 12–25 % slower than those that did not."""

    def __init__(self, started_ahead: Callable[[], list[int]]) -> None:
        self.started_ahead = started_ahead
        self.stopped: list[int] = []

    def phase(self, name: str) -> None:
        if name in QUIET_PHASES:
            self.pause()
        else:
            self.resume()

    def pause(self) -> None:
        if self.stopped:
            return
        for root in self.started_ahead():
            for pid in process_tree(root):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
                    self.stopped.append(pid)

    def resume(self) -> None:
        for pid in self.stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        self.stopped = []


@dataclass
class Primed:
    """A judge forked ahead of its job: CUDA warm, reference runner ready, a spare runner
    in hand; it waits for the job on ``job_fd`` and reports on ``result_fd``."""

    pid: int
    job_fd: int
    result_fd: int
    options: RunnerOptions
    spare_pid: int | None = None  # the runner it holds (a child of this parent, not of it)

    def suits(self, job: dict[str, Any]) -> bool:
        return job["device"] == self.options.device and (
            bool(job.get("unsafe_no_jail")) != self.options.jail
        )

    def alive(self) -> bool:
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        if done:
            self.pid = 0
        return not done

    def discard(self) -> None:
        """Close its job pipe (it exits on end of input) and reap it."""
        for fd in (self.job_fd, self.result_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, 9)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)


def run_primed_child(
    job_fd: int, write_fd: int, control: Sequence[int], spare: RunnerProcess | None, device: str
) -> None:
    """In a judge forked ahead: prepare, wait for the job, judge it, exit."""

    def body() -> None:
        from engine.grading.judge.prepared import prepare

        _isolate(control, spare)
        prepared = prepare(device)
        with os.fdopen(job_fd, "rb") as jobs:
            line = jobs.readline()
        if line:
            _judge(json.loads(line), write_fd, spare, prepared)

    _exit_after(body)


def prime(spares: Spares, control: Sequence[int]) -> Primed | None:
    """Fork the next job's judge now (only when spare runners are configured)."""
    if not spares.prime_judges or spares.options is None:
        return None
    spare = spares.pool.pop(0) if spares.pool else None
    spares.lent = spare is not None and spares.template is not None
    control = [*control, *spares.private_fds()]
    job_read, job_write = os.pipe()
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(job_write)
        os.close(read_fd)
        run_primed_child(job_read, write_fd, control, spare, spares.options.device)
    os.close(job_read)
    os.close(write_fd)
    spares.after_fork(spare)
    return Primed(pid, job_write, read_fd, spares.options, spare.pid if spare else None)


def serve(control_in: int, control_out: int, spares: Spares) -> None:
    from engine.grading.parent.supervise import Limits

    reader = os.fdopen(control_in, "rb")
    control = (control_in, control_out)

    def send(message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        while data:
            data = data[os.write(control_out, data) :]

    spares.refill()
    primed = prime(spares, control)
    spares.refill()
    try:
        while True:
            line = reader.readline()
            if not line:
                return
            message = json.loads(line)
            if message.get("kind") == "exit":
                return
            if message.get("kind") != "job":
                continue
            job, limits = message["job"], Limits(**message.get("limits", {}))
            if primed is not None and not primed.alive():
                primed.discard()
                primed = None
            if primed is not None and primed.suits(job):
                pid, read_fd = primed.pid, primed.result_fd
                data = (json.dumps(job) + "\n").encode()
                try:
                    while data:
                        data = data[os.write(primed.job_fd, data) :]
                finally:
                    os.close(primed.job_fd)
                primed = None
            else:
                if primed is not None:
                    primed.discard()
                    primed = None
                pid, read_fd = fork_job(job, spares, control)
            send({"kind": "started", "pid": pid})
            if spares.template is None:  # the next job's runner imports while this one runs
                spares.refill()
                primed = prime(spares, control)
                spares.refill()
            background = BackgroundPause(started_ahead(spares, primed))
            run_supervised(pid, read_fd, job, limits, spares, send, background)
            if spares.template is not None:  # a fork empties the jail: only now
                spares.returned()
                spares.refill()
                primed = prime(spares, control)
    finally:
        if primed is not None:
            primed.discard()


def started_ahead(spares: Spares, primed: Primed | None) -> Callable[[], list[int]]:
    """The processes started ahead of the next jobs, as they are when asked."""

    def pids() -> list[int]:
        found = [spare.pid for spare in spares.pool]
        if primed is not None and primed.pid:
            found += [primed.pid] + ([primed.spare_pid] if primed.spare_pid else [])
        return found

    return pids


def fork_job(job: dict[str, Any], spares: Spares, control: Sequence[int]) -> tuple[int, int]:
    """Fork a judge for ``job`` now (no primed judge suits it); returns (pid, result fd)."""
    spare = spares.take(job)
    control = [*control, *spares.private_fds()]
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        run_child(job, write_fd, control, spare)
    os.close(write_fd)
    spares.after_fork(spare)
    return pid, read_fd


def run_supervised(
    pid: int,
    read_fd: int,
    job: dict[str, Any],
    limits: Any,
    spares: Spares,
    send: Callable[[dict[str, Any]], None],
    background: BackgroundPause | None = None,
) -> None:
    """Watch the judge until it reports or is killed, then send its outcome (``background``
    pauses what was started ahead while the judge times calls)."""
    from engine.grading.parent.supervise import ChildOutcome, supervise

    def poll(pid: int = pid) -> int | None:
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None

    try:
        outcome = supervise(
            pid,
            read_fd,
            job["nonce"],
            limits,
            poll,
            Path(job["workdir"]) / "worker.log",
            background.phase if background is not None else None,
        )
    except Exception as exc:  # noqa: BLE001 - report instead of dying
        outcome = ChildOutcome(pid=pid, log_tail=f"supervisor error: {exc!r}")
    finally:
        os.close(read_fd)
        if background is not None:
            background.resume()
    with contextlib.suppress(ChildProcessError):  # reap if not collected yet
        os.waitpid(pid, os.WNOHANG)
    spares.reap()
    send({"kind": "outcome", "outcome": outcome.to_dict()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.grading.parent.zygote")
    parser.add_argument("--no-dsls", action="store_true", help="do not preload the DSLs")
    parser.add_argument(
        "--spare-device",
        choices=("cpu", "cuda", "none"),
        default="none",
        help="keep one submission runner for this device started ahead of each job",
    )
    parser.add_argument("--unsafe-no-jail", action="store_true", help="spare runners unjailed")
    parser.add_argument("--spares", type=int, default=1, help="runners kept started ahead")
    parser.add_argument(
        "--template", action="store_true", help="fork each runner from a jailed runner template"
    )
    parser.add_argument("--no-prime", action="store_true", help="fork no judge ahead of its job")
    args = parser.parse_args(argv)
    # a SIGKILLed engine takes its warm parent along (and, through theirs, its judges): a
    # grading left running would share the GPU with the resumed run's
    die_with_parent(int(os.environ.get("MKB_BACKEND_PID", "0")) or None)
    share = placement.from_env()
    if share is not None:  # before torch's threads start: they, and every judge, inherit it
        placement.pin_self(share.judge)
    control_in, control_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints go to stderr, never onto the control channel
    start = time.monotonic()
    loaded = preload(not args.no_dsls)
    ready = {
        "kind": "ready",
        "pid": os.getpid(),
        "preloaded": loaded,
        "import_s": round(time.monotonic() - start, 3),
    }
    os.write(control_out, (json.dumps(ready) + "\n").encode())
    options = None
    if args.spare_device != "none":
        options = RunnerOptions(
            device=args.spare_device, preload_dsls=not args.no_dsls, jail=not args.unsafe_no_jail
        )
    template = None
    if options is not None and options.jail and args.template:
        template = TemplateSource(options)
        template.start()  # its imports run beside whatever comes next
    spares = Spares(options, args.spares, template, prime_judges=not args.no_prime)
    try:
        serve(control_in, control_out, spares)
    finally:
        spares.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
