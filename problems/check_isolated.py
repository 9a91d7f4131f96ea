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
