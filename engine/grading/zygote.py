"""The warm parent: imports torch, the catalog and the DSLs once, then forks one child per job.

Run as ``python -m engine.grading.zygote [--no-dsls]``. It never initialises CUDA (so forked
children can), and talks JSON lines on its stdin/stdout with the backend that started it:

* out ``{"kind": "ready", "pid": …, "preloaded": […]}`` once imports are done;
* in ``{"kind": "job", "job": {…}, "limits": {…}}`` → out ``{"kind": "started", "pid": …}``
  then ``{"kind": "outcome", "outcome": {…}}``;
* in ``{"kind": "exit"}`` (or end of input) → exits.

Each child starts a new session, gets /dev/null as stdin and a log file as stdout/stderr,
and reports over its own pipe (see :mod:`engine.grading.supervise`); one job at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DSL_MODULES = ("cutlass", "cutlass.cute", "tvm", "tvm_ffi")


def preload(dsls: bool) -> list[str]:
    """Import what every evaluation needs; returns the optional modules that loaded."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - see Evaluation.run

    import engine.grading.dsl_hooks  # noqa: F401
    import engine.grading.guards  # noqa: F401
    import engine.grading.timing  # noqa: F401
    import engine.grading.worker  # noqa: F401
    import problems.compare  # noqa: F401
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


def run_child(job: dict[str, Any], write_fd: int, control: Sequence[int]) -> None:
    """In the forked child: isolate, redirect, evaluate, and exit without returning."""
    code = 0
    try:
        os.setsid()
        for fd in control:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        log = os.open(Path(job["workdir"]) / "worker.log", os.O_WRONLY | os.O_CREAT, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(job["workdir"])
        from engine.grading.worker import run_job

        run_job(job, write_fd)
    except BaseException:  # noqa: BLE001
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(control_in: int, control_out: int) -> None:
    from engine.grading.supervise import Limits, Outcome, supervise

    reader = os.fdopen(control_in, "rb")

    def send(message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        while data:
            data = data[os.write(control_out, data) :]

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
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            run_child(job, write_fd, (control_in, control_out))
        os.close(write_fd)
        send({"kind": "started", "pid": pid})

        def poll(pid: int = pid) -> int | None:
            done, status = os.waitpid(pid, os.WNOHANG)
            return os.waitstatus_to_exitcode(status) if done else None

        try:
            outcome = supervise(
                pid, read_fd, job["nonce"], limits, poll, Path(job["workdir"]) / "worker.log"
            )
        except Exception as exc:  # noqa: BLE001 - report instead of dying
            outcome = Outcome(pid=pid, log_tail=f"supervisor error: {exc!r}")
        finally:
            os.close(read_fd)
        with contextlib.suppress(ChildProcessError):  # reap if not collected yet
            os.waitpid(pid, os.WNOHANG)
        send({"kind": "outcome", "outcome": outcome.to_dict()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.grading.zygote")
    parser.add_argument("--no-dsls", action="store_true", help="do not preload the DSLs")
    args = parser.parse_args(argv)
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
    serve(control_in, control_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
