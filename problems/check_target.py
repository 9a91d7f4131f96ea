"""``mkb problems check --gpu GPU``: each problem's memory need and speed of light on one
grading GPU, from shapes alone (no draws, no GPU): the problems that do not fit are flagged.

Memory needs come from :mod:`problems.memory`; SOL from :mod:`problems.sol` with the GPU's
row; capacities from :mod:`problems.targets`. Exit status 1 when a problem does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from problems.memory import memory_need
from problems.sol import sol_estimate
from problems.spec import Problem
from problems.targets import Target


@dataclass(frozen=True)
class TargetRow:
    """One problem on one grading GPU."""

    id: str
    slug: str
    need_gb: float | None
    method: str  # stored | traced | measured | unknown
    fits: bool | None
    sol_us: float | None
    bound: str
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def target_row(problem: Problem, gpu: Target, scale: str) -> TargetRow:
    """The need, fit and SOL of one problem (an error in either is reported in ``note``)."""
    notes = []
    try:
        need = memory_need(problem, scale, gpu.memory_bytes)
        need_gb = None if need.total_bytes is None else need.total_bytes / 1e9
        method, fits = need.method, need.fits(gpu.memory_bytes)
        if need.note:
            notes.append(need.note)
        if need.anchor == "host":
            notes.append("float64 anchor on the host (mkb problems memory)")
    except Exception as exc:  # noqa: BLE001 - one broken problem must not stop the rest
        need_gb, method, fits = None, "unknown", None
        notes.append(f"memory: {type(exc).__name__}: {exc}"[:200])
    try:
        sol = sol_estimate(problem.cost(scale), gpu.hardware)
        sol_us: float | None = sol.seconds * 1e6
        bound = sol.bound
    except Exception as exc:  # noqa: BLE001
        sol_us, bound = None, ""
        notes.append(f"SOL: {type(exc).__name__}: {exc}"[:200])
    return TargetRow(
        problem.id, problem.slug, need_gb, method, fits, sol_us, bound, "; ".join(notes)
    )


def check_target(
    problems: Sequence[Problem],
    gpu: Target,
    scale: str,
    progress: Callable[[TargetRow], None] | None = None,
) -> list[TargetRow]:
    """One row per problem, in catalog order."""
    rows = []
    for problem in sorted(problems, key=lambda p: p.number):
        row = target_row(problem, gpu, scale)
        rows.append(row)
        if progress:
            progress(row)
    return rows


def format_row(row: TargetRow) -> str:
    need = "?" if row.need_gb is None else f"{row.need_gb:8.2f}"
    fits = {True: "fits", False: "DOES NOT FIT", None: "unknown"}[row.fits]
    sol = "?" if row.sol_us is None else f"{row.sol_us:12.2f}"
    line = f"{row.id}  {need:>8} GB ({row.method:<8})  {fits:<12}  SOL {sol:>12} us  {row.bound}"
    return f"{line}  [{row.note}]" if row.note and row.fits is not True else line


def summary(rows: Sequence[TargetRow], gpu: Target, scale: str) -> str:
    fit = sum(r.fits is True for r in rows)
    unfit = [r.id for r in rows if r.fits is False]
    unknown = [r.id for r in rows if r.fits is None]
    text = (
        f"{len(rows)} problems on the {gpu.describe()}, {gpu.memory_bytes / 1e9:.0f} GB "
        f"({scale} scale): {fit} fit, {len(unfit)} do not"
    )
    text += f" ({', '.join(unfit)})" if unfit else ""
    text += f", {len(unknown)} unknown ({', '.join(unknown)})" if unknown else ""
    return text
