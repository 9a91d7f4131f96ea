"""``mkb problems memory``: each problem's planned GPU memory (judge, runner, the grading's
peak on one card) and whether it fits a card of a given size, from shapes alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from problems.memory import HEADROOM_BYTES, memory_plan
from problems.spec import Problem


@dataclass(frozen=True)
class MemoryRow:
    """One problem's plan on one card size (figures in GB, 1e9 bytes)."""

    id: str
    slug: str
    judge_gb: float | None
    runner_gb: float | None
    total_gb: float | None
    method: str  # traced | measured | unknown
    fits: bool | None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _gb(x: float | None) -> float | None:
    return None if x is None else round(x / 1e9, 2)


def memory_row(problem: Problem, capacity_gb: float, scale: str = "full") -> MemoryRow:
    """The plan of one problem (an error while planning is reported in ``note``)."""
    try:
        plan = memory_plan(problem, scale)
    except Exception as exc:  # noqa: BLE001 - one broken problem must not stop the rest
        note = f"{type(exc).__name__}: {exc}"[:200]
        return MemoryRow(problem.id, problem.slug, None, None, None, "unknown", None, note)
    return MemoryRow(
        problem.id,
        problem.slug,
        _gb(plan.judge_bytes),
        _gb(plan.runner_bytes),
        _gb(plan.total_bytes),
        plan.method,
        plan.fits(capacity_gb * 1e9),
        plan.note,
    )


def memory_rows(
    problems: Sequence[Problem],
    capacity_gb: float,
    scale: str = "full",
    progress: Callable[[MemoryRow], None] | None = None,
) -> list[MemoryRow]:
    """One row per problem, in catalog order."""
    rows = []
    for problem in sorted(problems, key=lambda p: p.number):
        row = memory_row(problem, capacity_gb, scale)
        rows.append(row)
        if progress:
            progress(row)
    return rows


def format_row(row: MemoryRow) -> str:
    def gb(x: float | None) -> str:
        return "?" if x is None else f"{x:.2f}"

    fits = {True: "fits", False: "DOES NOT FIT", None: "unknown"}[row.fits]
    line = (
        f"{row.id}  judge {gb(row.judge_gb):>6} GB  runner {gb(row.runner_gb):>6} GB  "
        f"grading {gb(row.total_gb):>7} GB ({row.method:<8})  {fits}"
    )
    return f"{line}  [{row.note}]" if row.note else line


def summary(rows: Sequence[MemoryRow], capacity_gb: float, scale: str) -> str:
    unfit = [r.id for r in rows if r.fits is False]
    unknown = [r.id for r in rows if r.fits is None]
    text = (
        f"{len(rows)} problems ({scale} scale) on a {capacity_gb:g} GB card, "
        f"{HEADROOM_BYTES / 1e9:g} GB kept free: {sum(r.fits is True for r in rows)} fit, "
        f"{len(unfit)} do not"
    )
    text += f" ({', '.join(unfit)})" if unfit else ""
    text += f", {len(unknown)} unknown ({', '.join(unknown)})" if unknown else ""
    return text
