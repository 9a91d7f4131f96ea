"""Parent-side supervision of one grading child: limits, the private result channel, kills.

The child runs in its own session (its pid is its process group); on a timeout, a memory
overrun or after it answers, the whole group is killed. Only lines on the result pipe that
carry the evaluation's nonce count; anything else (stdout, forged lines) is ignored.

Used both by the plain subprocess launcher and inside the warm parent (``zygote``), so it
depends on the standard library only.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.grading.processes import SECRET_MARKERS, read_tail

REPO_ROOT = Path(__file__).resolve().parents[3]
MAX_CHANNEL_BYTES = 32 * 1024 * 1024


HOST_ANCHOR = "host_anchor"  # the judge's phase while its float64 anchor runs on the host


@dataclass
class Limits:
    """Wall-clock and memory limits for one evaluation."""

    timeout_s: float = 600.0  # import + correctness + warmup + timing + rechecks
    eager_timeout_s: float = 600.0  # the eager reference phase, outside the limit above
    memory_limit_mb: int | None = None  # resident memory of the child; None = no watchdog
    grace_s: float = 10.0  # after the result arrives, time left to exit
    # the judge's own work outside the limits above, at most this much in all: a float64
    # anchor on the host (phase ``host_anchor`` until the judge's ``judge_time`` message)
    judge_extra_s: float = 0.0


@dataclass
class ChildOutcome:
    """What came back from one grading child: its result, phases, exit and kills."""

    result: dict[str, Any] | None = None
    phases: list[str] = field(default_factory=list)
    exit_code: int | None = None  # negative: killed by that signal
    timed_out: bool = False
    memory_killed: bool = False
    elapsed_s: float = 0.0
    log_tail: str = ""
    pid: int | None = None
    ignored_lines: int = 0

    @property
    def last_phase(self) -> str | None:
        return self.phases[-1] if self.phases else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChildOutcome:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def kill_group(pid: int) -> None:
    """SIGKILL the child's process group (and the child itself if it left the group)."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


class _ChildWatch:
    """One supervision in progress: the deadline, the result channel and the memory watchdog."""

    def __init__(
        self,
        pid: int,
        result_fd: int,
        nonce: str,
        limits: Limits,
        poll_exit: Callable[[], int | None],
        on_phase: Callable[[str], None] | None = None,
    ) -> None:
        self.pid = pid
        self.on_phase = on_phase
        self.result_fd = result_fd
        self.nonce = nonce
        self.limits = limits
        self.poll_exit = poll_exit
        self.outcome = ChildOutcome(pid=pid)
        self.start = time.monotonic()
        self.deadline = self.start + limits.eager_timeout_s
        self.extended = 0.0  # seconds of the judge's own work so far (host anchors)
        self.paused: tuple[float, float] | None = None  # (since, submission's time left)
        self.resumed_phase: str | None = None  # the phase before the host anchor
        self.buffer = b""
        self.received = 0
        self.next_rss = 0.0
        self.exit_code: int | None = None
        self.open_channel = True

    def handle(self, line: bytes) -> None:
        """Take one line of the result channel: a phase or the result, if it has the nonce."""
        try:
            message = json.loads(line)
            tagged = isinstance(message, dict) and hmac.compare_digest(
                str(message.get("nonce", "")), self.nonce
            )
        except (ValueError, TypeError):
            tagged = False
        if not tagged:
            self.outcome.ignored_lines += 1
            return
        outcome, limits = self.outcome, self.limits
        if message.get("kind") == "phase":
            outcome.phases.append(str(message.get("data")))
            if self.on_phase is not None:
                self.on_phase(outcome.phases[-1])
            if message.get("data") == "eager_done":  # starting the runner: bounded apart
                self.deadline = time.monotonic() + limits.eager_timeout_s
            elif message.get("data") == "import":  # the submission's own time starts
                self.deadline = time.monotonic() + limits.timeout_s
            elif message.get("data") == HOST_ANCHOR:
                self.pause()
        elif message.get("kind") == "judge_time":
            self.resume()
        elif message.get("kind") == "result" and outcome.result is None:
            outcome.result = message.get("data") if isinstance(message.get("data"), dict) else {}
            self.deadline = min(self.deadline, time.monotonic() + limits.grace_s)

    def pause(self) -> None:
        """The judge's own work begins (a float64 anchor on the host): the submission's clock
        stops, and the judge gets what is left of :attr:`Limits.judge_extra_s`."""
        if self.paused is not None:
            return
        now = time.monotonic()
        self.paused = (now, max(0.0, self.deadline - now))
        self.deadline = now + max(0.0, self.limits.judge_extra_s - self.extended)
        phases = self.outcome.phases
        self.resumed_phase = phases[-2] if len(phases) > 1 else None

    def resume(self) -> None:
        """The judge's own work is done: the submission's clock goes on where it stopped."""
        if self.paused is None:
            return
        now = time.monotonic()
        since, left = self.paused
        self.extended += now - since
        self.deadline = now + left
        self.paused = None
        if self.resumed_phase is not None:  # the phase the judge went on with
            self.outcome.phases.append(self.resumed_phase)

    def read_channel(self) -> None:
        """Wait briefly for the result channel and handle the complete lines that arrived."""
        if not self.open_channel:
            time.sleep(0.05)
            return
        ready, _, _ = select.select([self.result_fd], [], [], 0.05)
        if not ready:
            return
        try:
            chunk = os.read(self.result_fd, 1 << 20)
        except BlockingIOError:
            return
        if chunk == b"":
            self.open_channel = False
            return
        self.received += len(chunk)
        if self.received > MAX_CHANNEL_BYTES:
            self.open_channel = False  # flooding: stop reading, the child is killed
            kill_group(self.pid)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            self.handle(line)

    def check_memory(self, now: float) -> None:
        """Kill the child when its resident memory passes the limit (checked every 0.2 s)."""
        limit = self.limits.memory_limit_mb
        if limit and now >= self.next_rss and self.exit_code is None:
            self.next_rss = now + 0.2
            if rss_mb(self.pid) > limit:
                self.outcome.memory_killed = True
                kill_group(self.pid)

    def kill_at_deadline(self, now: float) -> None:
        """The deadline passed with the child alive: kill it and wait up to 5 s for its exit."""
        if self.outcome.result is None:
            self.outcome.timed_out = True
        kill_group(self.pid)
        self.deadline = now + 5.0
        while self.exit_code is None and time.monotonic() < self.deadline:
            self.exit_code = self.poll_exit()
            time.sleep(0.02)

    def run(self) -> None:
        """Read, poll and enforce the limits until the child is done (or killed)."""
        while True:
            self.read_channel()
            if self.exit_code is None:
                self.exit_code = self.poll_exit()
            if self.exit_code is not None and not self.open_channel:
                return
            if self.exit_code is not None and time.monotonic() > self.deadline:
                return  # exited but a descendant keeps the pipe open
            now = time.monotonic()
            self.check_memory(now)
            if now > self.deadline and self.exit_code is None:
                self.kill_at_deadline(now)
                return


def supervise(
    pid: int,
    result_fd: int,
    nonce: str,
    limits: Limits,
    poll_exit: Callable[[], int | None],
    log_path: str | Path | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> ChildOutcome:
    """Watch one child until it exits or is killed; returns what it reported (``on_phase``
    hears each phase the child announces, as it arrives)."""
    watch = _ChildWatch(pid, result_fd, nonce, limits, poll_exit, on_phase)
    os.set_blocking(result_fd, False)
    watch.run()
    kill_group(pid)  # nothing of the evaluation outlives it
    outcome = watch.outcome
    outcome.exit_code = watch.exit_code
    outcome.elapsed_s = round(time.monotonic() - watch.start, 3)
    outcome.log_tail = read_tail(log_path)
    return outcome


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a grading child gets: ours minus secrets, the repo on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in SECRET_MARKERS)}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONSTARTUP", None)
    env.update(extra or {})
    return env


def run_subprocess(
    job: dict[str, Any],
    limits: Limits,
    workdir: str | Path,
    env_extra: dict[str, str] | None = None,
    python: str | None = None,
) -> ChildOutcome:
    """Judge ``job`` in a fresh ``python -m engine.grading.judge.job`` child (blocking)."""
    read_fd, write_fd = os.pipe()
    log_path = Path(workdir) / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                python or sys.executable,
                "-m",
                "engine.grading.judge.job",
                "--result-fd",
                str(write_fd),
            ],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            start_new_session=True,
            cwd=str(workdir),
            env=child_env(env_extra),
        )
    os.close(write_fd)
    try:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
        return supervise(proc.pid, read_fd, job["nonce"], limits, proc.poll, log_path)
    finally:
        os.close(read_fd)
        kill_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def tagged_messages(data: bytes | str, nonce: str) -> tuple[list[dict[str, Any]], int]:
    """The JSON-line messages in ``data`` that carry ``nonce``, and how many lines did not."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    found: list[dict[str, Any]] = []
    ignored = 0
    for line in text.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            ignored += 1
            continue
        if isinstance(message, dict) and hmac.compare_digest(str(message.get("nonce", "")), nonce):
            found.append(message)
        else:
            ignored += 1
    return found, ignored


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.grading.parent.supervise --job-file F``: one supervised evaluation.

    For hosts reached only through a shell (Harbor environments): the job file is read and
    deleted before the worker starts, the worker runs under :func:`supervise`, and the outcome
    is printed on stdout as one line tagged with the job's nonce.
    """
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m engine.grading.parent.supervise")
    parser.add_argument("--job-file", required=True)
    args = parser.parse_args(argv)
    with open(args.job_file, encoding="utf-8") as fh:
        message = json.load(fh)
    os.unlink(args.job_file)
    job, limits = message["job"], Limits(**message.get("limits", {}))
    job["workdir"] = tempfile.mkdtemp(prefix="mkb-grade-")
    outcome = run_subprocess(job, limits, job["workdir"])
    line = json.dumps(
        {"nonce": job["nonce"], "kind": "outcome", "data": outcome.to_dict()}, default=str
    )
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
