"""One child process per problem for the validator on a GPU.

A full-scale check of the whole catalog in one process keeps whatever the caching allocator,
autograd or a stray reference holds from earlier problems (p38's float64 anchor alone needs
~60 GB of the H200's 140): each problem in a fresh interpreter starts from an empty device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from problems.check_report import CheckOptions, ProblemReport
from problems.spec import Problem

PACKAGE_PARENT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 1800.0


def child_command(problem: Problem, opts: CheckOptions) -> list[str]:
    """``python -m problems.check`` for this one problem, in process, as JSON."""
    cmd = [sys.executable, "-m", "problems.check", str(problem.path), "--in-process", "--json"]
    cmd += ["--device", opts.device, "--scale", opts.scale, "--draws", str(opts.draws)]
    if opts.discrete_draws is not None:
        cmd += ["--discrete-draws", str(opts.discrete_draws)]
    if opts.seed is not None:
        cmd += ["--seed", str(opts.seed)]
    return cmd


def check_in_child(
    problem: Problem, opts: CheckOptions, timeout_s: float = CHILD_TIMEOUT_S
) -> ProblemReport:
    """Check one problem in a fresh interpreter; a crash or a hang becomes its error."""
    env = dict(os.environ)
    # one problem's allocations in a fresh caching allocator: expandable segments keep a
    # float64 anchor of ~11 GB tensors from stranding reserved memory (p38 on the H200)
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH", "")) if p
    )

    def failed(message: str) -> ProblemReport:
        return ProblemReport(problem.id, problem.slug, str(problem.path), error=message)

    try:
        proc = subprocess.run(
            child_command(problem, opts),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=PACKAGE_PARENT,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return failed(f"the check's child process ran past {timeout_s:.0f} s")
    try:
        rows = json.loads(proc.stdout)
        row = next(r for r in rows if r.get("id") == problem.id)
    except (ValueError, StopIteration, AttributeError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return failed(f"the check's child process exited {proc.returncode}: {' | '.join(tail)}")
    return ProblemReport.from_dict(row, str(problem.path))


def ran_out_of_memory(report: ProblemReport) -> bool:
    """Whether a failed report says the device (or host) ran out of memory."""
    if report.passed:
        return False
    text = json.dumps(report.as_dict()).lower()
    return "out of memory" in text or "outofmemoryerror" in text


def check_in_children(
    problems: Sequence[Problem],
    opts: CheckOptions,
    jobs: int = 1,
    progress: Callable[[ProblemReport], None] | None = None,
    child: Callable[[Problem, CheckOptions], ProblemReport] = check_in_child,
) -> list[ProblemReport]:
    """Check each problem in a child of its own, ``jobs`` children at a time.

    Children that share a device can starve each other of memory: a problem whose child ran
    out of memory beside others is checked again alone once the rest are done, and only that
    second report counts. Reports come back in the order of ``problems``."""
    reports: dict[str, ProblemReport] = {}
    retry: list[Problem] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(child, p, opts): p for p in problems}
        for future in as_completed(futures):
            problem = futures[future]
            report = future.result()
            if jobs > 1 and ran_out_of_memory(report):
                retry.append(problem)
                continue
            reports[problem.id] = report
            if progress:
                progress(report)
    for problem in sorted(retry, key=lambda p: p.number):
        report = child(problem, opts)
        reports[problem.id] = report
        if progress:
            progress(report)
    return [reports[p.id] for p in problems]
