"""The judge's process: one job in, phases and one result out.

Run as ``python -m engine.grading.judge.job --result-fd N`` with the job on stdin (a cold
judge), or through :func:`run_job` in a child forked from the warm parent
(:mod:`engine.grading.parent.zygote`, which may :func:`prepare` it before the job comes). The
verdict of every outcome, a pass or an exception, comes from
:func:`engine.grading.verdict.decide`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from engine.grading.judge import placement
from engine.grading.judge.judge import Judge
from engine.grading.judge.runner_proc import (
    RunnerDied,
    RunnerMemory,
    RunnerOptions,
    RunnerProcess,
    RunnerTimeout,
)
from engine.grading.judge.state import MAX_ERROR_CHARS, Evaluation, Prepared
from engine.grading.verdict import (
    Crashed,
    Evidence,
    InfrastructureError,
    OverLimit,
    Rejected,
    decide,
)

__all__ = ["Channel", "Prepared", "main", "prepare", "run_job", "runner_options"]


class Channel:
    """JSON lines to the process that started the judge (phases, then one result)."""

    def __init__(self, fd: int, nonce: str) -> None:
        self._fd = fd
        self._nonce = nonce

    def send(self, kind: str, data: Any) -> None:
        line = json.dumps({"nonce": self._nonce, "kind": kind, "data": data}, default=str)
        payload = (line + "\n").encode()
        while payload:
            payload = payload[os.write(self._fd, payload) :]


def runner_options(job: dict[str, Any]) -> RunnerOptions:
    """How the submission's runner for ``job`` is started."""
    return RunnerOptions(
        device="cuda" if job["device"] == "cuda" else "cpu",
        preload_dsls=bool(job.get("preload_dsls", True)),
        dsl=job.get("dsl"),  # started for this job: its own DSL only
        jail=not job.get("unsafe_no_jail", False),
        memory_limit_mb=job.get("memory_limit_mb") or job.get("rss_limit_mb"),
    )


def prepare(device: str) -> Prepared:
    """Fork the reference runner (before this process touches CUDA), then warm CUDA here."""
    import torch

    reference = RunnerProcess.fork_reference(device, None)
    if device == "cuda":
        square = torch.ones(64, 64, dtype=torch.float64, device="cuda")
        float((square @ square).sum())  # context and the BLAS handle the anchors use
    reference.wait_ready()
    return Prepared(device, reference)


def trimmed_traceback(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return text if len(text) <= MAX_ERROR_CHARS else "…" + text[-MAX_ERROR_CHARS:]


def evidence_of(exc: BaseException, submission_ran: bool) -> Evidence:
    """What a judge's exception is evidence of: the runner's own ends named (a timeout, the
    memory limit, a death: the submission's fault once it had been imported)."""
    if isinstance(exc, RunnerTimeout):
        return OverLimit("timeout")
    if isinstance(exc, RunnerMemory):
        return OverLimit("memory")
    if isinstance(exc, RunnerDied):
        return Crashed(f"the runner died: {exc}", submission_ran)
    return exc


def run_job(
    job: dict[str, Any],
    result_fd: int,
    spare: RunnerProcess | None = None,
    prepared: Prepared | None = None,
) -> None:
    """Judge ``job`` and send the result on ``result_fd``."""
    channel = Channel(result_fd, job["nonce"])
    judge: Judge | None = None
    result: dict[str, Any] = {}
    try:
        judge = Judge(Evaluation.from_job(job, channel), runner_options(job), spare, prepared)
        spare = prepared = None
        result = judge.result
        evidence: Evidence = judge.run()
    except BaseException as exc:  # noqa: BLE001 - our own failure: an error, never a pass
        evidence = evidence_of(exc, result.get("import_ok") is not None)
        if evidence is exc and not isinstance(exc, (Rejected, InfrastructureError)):
            result["error"] = trimmed_traceback(exc)
    finally:
        if judge is not None:
            judge.close()
        if spare is not None:
            spare.close()
        if prepared is not None:
            prepared.reference.close()
    verdict, reason, message = decide(evidence)
    result.update(verdict=verdict, reason=reason, message=message)
    channel.send("result", result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.grading.judge.job")
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    share = placement.from_env()
    if share is not None:  # a cold judge places itself as a warm parent does
        placement.pin_self(share.judge)
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.set_inheritable(args.result_fd, False)
    # a cold judge: the submission's runner starts first, before this process imports torch
    # and the problem (seconds), so that its own start overlaps them (a failure here is left
    # to the judge, which spawns again and reports it)
    spare: RunnerProcess | None = None
    with contextlib.suppress(Exception):
        spare = RunnerProcess.spawn(runner_options(job))
    run_job(job, args.result_fd, spare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
