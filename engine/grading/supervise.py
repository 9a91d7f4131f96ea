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

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_CHANNEL_BYTES = 32 * 1024 * 1024
LOG_TAIL_CHARS = 4000
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY", "CREDENTIAL")


@dataclass
class Limits:
    """Wall-clock and memory limits for one evaluation."""

    timeout_s: float = 600.0  # import + correctness + warmup + timing + rechecks
    eager_timeout_s: float = 600.0  # the eager reference phase, outside the limit above
    memory_limit_mb: int | None = None  # resident memory of the child; None = no watchdog
    grace_s: float = 10.0  # after the result arrives, time left to exit


@dataclass
class Outcome:
    """What came back from one child."""

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
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
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


def read_tail(path: str | Path | None, chars: int = LOG_TAIL_CHARS) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - chars * 4))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return text[-chars:]


def supervise(
    pid: int,
    result_fd: int,
    nonce: str,
    limits: Limits,
    poll_exit: Callable[[], int | None],
    log_path: str | Path | None = None,
) -> Outcome:
    """Watch one child until it exits or is killed; returns what it reported."""
    outcome = Outcome(pid=pid)
    start = time.monotonic()
    deadline = start + limits.eager_timeout_s
    buffer = b""
    received = 0
    os.set_blocking(result_fd, False)
    next_rss = 0.0
    exit_code: int | None = None
    open_channel = True

    def handle(line: bytes) -> None:
        nonlocal deadline
        try:
            message = json.loads(line)
            tagged = isinstance(message, dict) and hmac.compare_digest(
                str(message.get("nonce", "")), nonce
            )
        except (ValueError, TypeError):
            tagged = False
        if not tagged:
            outcome.ignored_lines += 1
            return
        if message.get("kind") == "phase":
            outcome.phases.append(str(message.get("data")))
            if message.get("data") == "eager_done":  # starting the runner: bounded apart
                deadline = time.monotonic() + limits.eager_timeout_s
            elif message.get("data") == "import":  # the submission's own time starts
                deadline = time.monotonic() + limits.timeout_s
        elif message.get("kind") == "result" and outcome.result is None:
            outcome.result = message.get("data") if isinstance(message.get("data"), dict) else {}
            deadline = min(deadline, time.monotonic() + limits.grace_s)

    while True:
        if open_channel:
            ready, _, _ = select.select([result_fd], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(result_fd, 1 << 20)
                except BlockingIOError:
                    chunk = None
                if chunk == b"":
                    open_channel = False
                elif chunk:
                    received += len(chunk)
                    if received > MAX_CHANNEL_BYTES:
                        open_channel = False  # flooding: stop reading, the child is killed
                        kill_group(pid)
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        handle(line)
        else:
            time.sleep(0.05)
        if exit_code is None:
            exit_code = poll_exit()
        if exit_code is not None and not open_channel:
            break
        if exit_code is not None and time.monotonic() > deadline:
            break  # exited but a descendant keeps the pipe open
        now = time.monotonic()
        if limits.memory_limit_mb and now >= next_rss and exit_code is None:
            next_rss = now + 0.2
            if rss_mb(pid) > limits.memory_limit_mb:
                outcome.memory_killed = True
                kill_group(pid)
        if now > deadline and exit_code is None:
            if outcome.result is None:
                outcome.timed_out = True
            kill_group(pid)
            deadline = now + 5.0
            while exit_code is None and time.monotonic() < deadline:
                exit_code = poll_exit()
                time.sleep(0.02)
            break
    kill_group(pid)  # nothing of the evaluation outlives it
    outcome.exit_code = exit_code
    outcome.elapsed_s = round(time.monotonic() - start, 3)
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
) -> Outcome:
    """Judge ``job`` in a fresh ``python -m engine.grading.judge`` child (blocking)."""
    read_fd, write_fd = os.pipe()
    log_path = Path(workdir) / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [python or sys.executable, "-m", "engine.grading.judge", "--result-fd", str(write_fd)],
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
    """``python -m engine.grading.supervise --job-file F``: one supervised evaluation.

    For hosts reached only through a shell (Harbor environments): the job file is read and
    deleted before the worker starts, the worker runs under :func:`supervise`, and the outcome
    is printed on stdout as one line tagged with the job's nonce.
    """
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m engine.grading.supervise")
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
