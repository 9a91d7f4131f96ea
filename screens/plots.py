"""Plots in the terminal (textual-plotext): an attempt's speedup and % of speed of light per
submission, and the Lift view's ρ̄ with its 95% interval per model, direction and family (a
forest plot on a log₂ axis).

The series are computed by pure functions (``speedup_series``, ``sol_series``,
``forest_rows``) and drawn by :class:`PlotPanel`, which shows a one-line caption and either
the plot or, when there is nothing to draw, a placeholder saying why. Everything drawn is
numbers and labels the harness made (submission numbers, model, direction and family names
read through the sanitizing ``MkbApp.read``); no agent text reaches a plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from problems.sol import share_of_sol
from storage.queries import SubmissionRow

MAX_XTICKS = 10  # submission labels on the x axis (every k-th one past this)
FOREST_LABEL = 24  # cells for a forest row's label (model direction family)


@dataclass(frozen=True)
class Series:
    """Points (x = the submission's position, 1-based) of one value per submission."""

    xs: tuple[int, ...]
    ys: tuple[float, ...]
    labels: tuple[str, ...]  # every submission's label, by position
    total: int  # submissions considered (with a value or not)

    @property
    def missing(self) -> int:
        return self.total - len(self.xs)


@dataclass(frozen=True)
class ForestRow:
    """One lift row: ρ̄ with its 95% interval (None below 2 pairs)."""

    label: str
    gm: float
    low: float | None
    high: float | None
    n: int


def submission_label(sub: SubmissionRow) -> str:
    """``#3`` for a submission, ``F1`` for a final evaluation; ``2:#3`` on a later try."""
    mark = "F" if sub.purpose == "final" else "#"
    prefix = f"{sub.try_number}:" if sub.try_number > 1 else ""
    return f"{prefix}{mark}{sub.n}"


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _series(subs: Sequence[SubmissionRow], values: Sequence[float | None]) -> Series:
    points = [(i + 1, v) for i, v in enumerate(values) if v is not None]
    return Series(
        xs=tuple(x for x, _ in points),
        ys=tuple(y for _, y in points),
        labels=tuple(submission_label(s) for s in subs),
        total=len(subs),
    )


def speedup_series(subs: Sequence[SubmissionRow]) -> Series:
    """The speedup (eager ÷ implementation) of every submission that has one."""
    return _series(subs, [_finite(s.speedup) for s in subs])


def sol_share(sub: SubmissionRow) -> float | None:
    """The speed of light as a % of the submission's runtime, where the grader recorded
    ``sol_ms`` (a GPU it knows) and the submission has a speedup (it passed)."""
    fb = sub.feedback or {}
    if _finite(sub.speedup) is None:
        return None
    impl = _finite(fb.get("impl_median_ms")) or _finite(sub.impl_median_ms)
    return _finite(share_of_sol(_finite(fb.get("sol_ms")), impl))


def sol_series(subs: Sequence[SubmissionRow]) -> Series:
    return _series(subs, [sol_share(s) for s in subs])


def speedup_caption(series: Series) -> tuple[Text, str | None]:
    """The caption above the speedup plot, and the placeholder when nothing can be drawn."""
    caption = Text("speedup per submission", style="bold")
    caption.append(" (eager ÷ implementation; ⋅⋅⋅ eager, 1×)", style="dim")
    if series.total == 0:
        return caption, "no submissions yet"
    if not series.xs:
        return caption, (f"no speedups yet: {_count(series.total, 'submission')}, none "
                         "passed (a failing submission has no speedup)")
    if series.missing:
        caption.append(f" · {series.missing} of {series.total} without a speedup (failed)",
                       style="yellow")
    return caption, None


def sol_caption(series: Series) -> tuple[Text, str | None]:
    caption = Text("% of speed of light per submission", style="bold")
    caption.append(" (SOL time ÷ implementation time)", style="dim")
    if series.total == 0:
        return caption, "no submissions yet"
    if not series.xs:
        return caption, ("no % of speed of light: the grader records the speed of light "
                         "(sol_ms) only on a GPU it knows, and only passing submissions "
                         "have a runtime to compare")
    if series.missing:
        caption.append(f" · {series.missing} of {series.total} without one", style="yellow")
    return caption, None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def forest_rows(report: dict[str, Any] | None) -> list[ForestRow]:
    """The lift rows of an analysis report that have a ρ̄, in the table's order."""
    rows: list[ForestRow] = []
    for r in (report or {}).get("lift", []):
        iv = r.get("interval") or {}
        gm = _finite(iv.get("gm"))
        if gm is None or gm <= 0:
            continue
        low, high = _finite(iv.get("low")), _finite(iv.get("high"))
        if low is None or high is None or low <= 0 or high <= 0:
            low = high = None
        source, _, target = str(r["direction"]).partition("->")
        direction = f"{source[:1]}→{target[:1]}" if target else str(r["direction"])
        model = str(r["model"]).rsplit("/", 1)[-1]
        label = f"{model} {direction} {r['family']}"
        if len(label) > FOREST_LABEL:
            label = label[: FOREST_LABEL - 1] + "…"
        rows.append(ForestRow(label, gm, low, high, int(iv.get("n", r.get("n", 0)) or 0)))
    return rows


def forest_caption(rows: Sequence[ForestRow], preview: bool) -> tuple[Text, str | None]:
    caption = Text("ρ̄ per model, direction and family", style="bold")
    caption.append(" (● ρ̄, ─ 95% CI, none below 2 pairs; log₂ axis; │ ρ = 1)", style="dim")
    if preview:
        caption.append(" PREVIEW (CPU grading, not comparable)", style="bold yellow")
    if not rows:
        return caption, "no resolved comparisons yet: nothing to plot"
    return caption, None


class SeriesPlot(PlotextPlot):
    """A plotext plot that keeps what it drew (for tests and re-draws)."""

    DEFAULT_CSS = """
    SeriesPlot { height: 1fr; min-height: 6; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.points: list[tuple[float, float]] = []

    def draw_series(self, series: Series, color: str, reference: float | None = None) -> None:
        """One value per submission as a line with markers; ``reference`` a dotted level."""
        plt = self.plt
        plt.clear_figure()
        self.points = [(float(x), y) for x, y in zip(series.xs, series.ys)]
        top = max([*series.ys, reference or 0.0]) * 1.1 or 1.0
        plt.xlim(0.5, series.total + 0.5)
        plt.ylim(0, top)
        yticks = nice_ticks(top)
        plt.yticks(yticks, [f"{t:g}" for t in yticks])
        step = max(1, math.ceil(series.total / MAX_XTICKS))
        ticks = list(range(1, series.total + 1, step))
        plt.xticks([float(t) for t in ticks], [series.labels[t - 1] for t in ticks])
        if reference is not None:
            plt.plot([0.5, series.total + 0.5], [reference, reference], marker="⋅",
                     color="gray")
        if len(series.xs) > 1:
            plt.plot(list(series.xs), list(series.ys), marker="braille", color=color)
        plt.scatter(list(series.xs), list(series.ys), marker="●", color=color)
        self.refresh()

    def draw_forest(self, rows: Sequence[ForestRow]) -> None:
        """ρ̄ (●) and its interval (─) per row, top to bottom, on a log₂ axis; │ at ρ = 1."""
        plt = self.plt
        plt.clear_figure()
        self.points = []
        n = len(rows)
        values = [math.log2(v) for r in rows for v in (r.gm, r.low, r.high) if v is not None]
        lo, hi = math.floor(min([*values, 0.0])), math.ceil(max([*values, 0.0]))
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        plt.xlim(lo - 0.25, hi + 0.25)
        plt.ylim(0.5, n + 0.5)
        plt.xticks([float(k) for k in range(lo, hi + 1)],
                   [_ratio(2.0**k) for k in range(lo, hi + 1)])
        plt.yticks([float(n - i) for i in range(n)], [r.label for r in rows])
        plt.plot([0, 0], [0.5, n + 0.5], marker="│", color="gray")
        for i, r in enumerate(rows):
            y = n - i
            color = "green" if r.gm > 1 else "red" if r.gm < 1 else "white"
            if r.low is not None and r.high is not None:
                plt.plot([math.log2(r.low), math.log2(r.high)], [y, y], marker="─", color=color)
            plt.scatter([math.log2(r.gm)], [y], marker="●", color=color)
            self.points.append((r.gm, float(y)))
        self.refresh()


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """Ticks from 0 to ``top`` at a step of 1, 2 or 5 × 10^k, at most ``most`` of them."""
    raw = top / max(1, most - 1)
    power = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next((m * power for m in (1, 2, 5, 10) if m * power >= raw), 10 * power)
    return [round(k * step, 10) for k in range(int(top / step) + 1)]


def _ratio(value: float) -> str:
    return f"{value:g}" if value >= 1 else f"1/{1 / value:g}"


class PlotPanel(Vertical):
    """A caption, then a plot or (nothing to draw) a placeholder that says why."""

    DEFAULT_CSS = """
    PlotPanel { height: 1fr; }
    PlotPanel > .plot-caption { height: auto; padding: 0 1; }
    PlotPanel > .plot-placeholder { height: auto; color: $text-muted; padding: 1 2; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.placeholder: str | None = "loading…"

    def compose(self) -> ComposeResult:
        yield Static(classes="plot-caption", markup=False)
        yield Static(self.placeholder or "", classes="plot-placeholder", markup=False)
        yield SeriesPlot()

    @property
    def plot(self) -> SeriesPlot:
        return self.query_one(SeriesPlot)

    def show(self, caption: Text, placeholder: str | None) -> SeriesPlot | None:
        """Set the caption; show ``placeholder`` instead of the plot when it is not None.
        Returns the plot to draw on (None: the placeholder is shown)."""
        self.placeholder = placeholder
        self.query_one(".plot-caption", Static).update(caption)
        holder = self.query_one(".plot-placeholder", Static)
        holder.update(placeholder or "")
        holder.display = placeholder is not None
        plot = self.plot
        plot.display = placeholder is None
        if placeholder is not None:
            plot.points = []
            return None
        return plot
