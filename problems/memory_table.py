"""``mkb problems memory``: each problem's planned GPU memory (judge, runner, the grading's
peak on one card), where its float64 anchor runs and whether it fits a card of a given size,
from shapes alone; ``--write-plans`` traces them into the stored plans
(:mod:`problems.memory_store`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from problems.memory import (
    HEADROOM_BYTES,
    TRACE_BUDGET_S,
    anchor_flops,
    draw_sizes,
    memory_plan,
    traced_plan_error,
)
from problems.spec import Problem


@dataclass(frozen=True)
class MemoryRow:
    """One problem's plan on one card size (figures in GB, 1e9 bytes)."""

    id: str
    slug: str
    judge_gb: float | None
    runner_gb: float | None
    total_gb: float | None
    method: str  # stored | traced | measured | unknown
    fits: bool | None
    note: str = ""
    anchor: str = "device"  # where the float64 anchor runs on this card: device | host
    host_gb: float | None = None  # the judge's host memory for a host anchor
    anchor_s: float | None = None  # one host anchor run's estimated seconds
    draw: str = "host"  # where a checked draw waits while the references run: host | device

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _gb(x: float | None) -> float | None:
    return None if x is None else round(x / 1e9, 2)


def memory_row(problem: Problem, capacity_gb: float, scale: str = "full") -> MemoryRow:
    """The plan of one problem (an error while planning is reported in ``note``)."""
    try:
        plan = memory_plan(problem, scale, capacity_gb * 1e9)
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
        plan.anchor,
        _gb(plan.host_bytes),
        None if plan.anchor_s is None else round(plan.anchor_s, 1),
        plan.draw,
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
    if row.anchor == "host":
        seconds = "?" if row.anchor_s is None else f"~{row.anchor_s:.0f} s"
        line += (
            f"  anchor on the host: {gb(row.host_gb)} GB of RAM, {seconds} per run "
            "(estimate, 16 cores)"
        )
    elif row.anchor == "device" and row.draw == "host" and row.fits:
        line += "  checked draws wait on the host"
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
    host = [r.id for r in rows if r.anchor == "host" and r.fits]
    text += f"; anchor on the host for {', '.join(host)}" if host else ""
    waits = [r.id for r in rows if r.anchor == "device" and r.draw == "host" and r.fits]
    text += f"; checked draws wait on the host for {', '.join(waits)}" if waits else ""
    return text


def write_plans(
    problems: Sequence[Problem],
    scales: Sequence[str] = ("full", "smoke"),
    budget_s: float = 10 * TRACE_BUDGET_S,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Trace each problem at each scale (``budget_s`` per traced run: no grading waits on
    these) and store the results (:func:`problems.memory_store.write_entries`, merged one
    problem at a time, so an interrupted run keeps what it traced); returns the store's
    size."""
    import time

    from problems.memory_store import entry_record, write_entries

    size = 0
    for problem in sorted(problems, key=lambda p: p.number):
        records = {}
        for scale in scales:
            start = time.process_time()
            try:
                sizes, why = draw_sizes(problem, scale, budget_s), ""
            except Exception as exc:  # noqa: BLE001 - recorded as the entry's error
                sizes, why = None, traced_plan_error(exc)
            flops = anchor_flops(problem, scale)
            records[(problem.id, scale)] = entry_record(problem.path, sizes, flops, why)
            if progress:
                spent = time.process_time() - start
                state = "traced" if sizes is not None else f"not traceable ({why})"
                progress(f"{problem.id} {scale}: {state}, {spent:.1f} s of CPU")
        size = write_entries(records)
    return size
