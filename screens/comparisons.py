"""The comparisons behind one lift cell: each pair's ρ beside the final speedups of its
baseline and treatment, PREVIEW pairs dimmed; enter opens one in the transfer inspector."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

from screens.app_bar import AppBar
from screens.base import PagedScreen, host
from screens.fit import Column, available_width, fill, fit
from screens.lift_cells import RHO_HELP, RHO_NOTE, grading_cell, interval_summary
from screens.render import VERDICT_STYLES, speedup_text
from storage import queries

COLUMNS = (
    Column("id", "id", drop=4),
    Column("problem", "problem"),
    Column("family", "family", min_width=6, drop=5),
    Column("rep", "rep"),
    Column("rho", "ρ"),
    Column("verdict", "verdict"),
    Column("base", "base ×"),
    Column("treat", "treat ×"),
    Column("grading", "grading", short="grd", drop=6),
    Column("source", "source", drop=1),
    Column("baseline", "baseline", drop=2),
    Column("treatment", "treatment", drop=3),
)


@dataclass(frozen=True)
class PairRow:
    """One comparison with the final outcomes of its baseline and treatment."""

    comparison: queries.ComparisonRow
    baseline: queries.AttemptRow | None
    treatment: queries.AttemptRow | None

    @property
    def preview(self) -> bool:
        return any(
            a is not None and a.outcome == "preview" for a in (self.baseline, self.treatment)
        )


def comparisons_for_cell(
    db: Database, experiment_id: str, model: str, direction: str, family: str
) -> list[queries.ComparisonRow]:
    return [
        c
        for c in queries.comparisons(db, experiment_id)
        if c.model == model
        and c.direction == direction
        and not c.variant
        and (family == "all" or c.family == family)
    ]


def pairs_for_cell(
    db: Database, experiment_id: str, model: str, direction: str, family: str
) -> list[PairRow]:
    """The cell's comparisons, each with its baseline and treatment attempts."""

    def attempt(attempt_id: int | None) -> queries.AttemptRow | None:
        return None if attempt_id is None else queries.attempt(db, attempt_id)

    return [
        PairRow(c, attempt(c.baseline_attempt_id), attempt(c.treatment_attempt_id))
        for c in comparisons_for_cell(db, experiment_id, model, direction, family)
    ]


def pair_cells(pair: PairRow, compact: bool = False) -> list[Text]:
    """A pair's cells in ``COLUMNS`` order; ρ and speedups dimmed when from preview."""
    c = pair.comparison
    dim = "dim" if pair.preview else ""
    rho = "unresolved" if not c.resolved else "-" if c.rho is None else f"{c.rho:.3f}"
    verdict = c.verdict or "-"
    if c.skipped:
        verdict += " (skipped)"

    def final(row: queries.AttemptRow | None) -> Text:
        return Text(speedup_text(row.speedup if row else None), style=dim, justify="right")

    def ref(attempt_id: int | None) -> Text:
        return Text("-" if attempt_id is None else str(attempt_id), justify="right")

    return [
        ref(c.id),
        Text(c.problem_id),
        Text(c.family),
        Text(str(c.replicate)),
        Text(rho, style=dim or ("dim" if not c.resolved else ""), justify="right"),
        Text(verdict, style=dim or VERDICT_STYLES.get(c.verdict or "", "")),
        final(pair.baseline),
        final(pair.treatment),
        grading_cell(pair.preview, compact),
        ref(c.source_attempt_id),
        ref(c.baseline_attempt_id),
        ref(c.treatment_attempt_id),
    ]


class ComparisonListScreen(PagedScreen):
    """The comparisons behind one lift cell."""

    HELP = RHO_HELP + " base × / treat ×: the final speedups of the baseline and treatment."
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back", id="comparisons.back"),
    ]
    DEFAULT_CSS = """
    ComparisonListScreen DataTable { height: 1fr; }
    ComparisonListScreen #comparisons-summary, ComparisonListScreen #comparisons-note {
        height: auto; padding: 0 1; }
    ComparisonListScreen #comparisons-note { color: $text-muted; }
    """

    def __init__(
        self,
        experiment_id: str,
        model: str,
        direction: str,
        family: str,
        interval: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.cell = (experiment_id, model, direction, family)
        self.interval = interval
        self.pairs: list[PairRow] = []

    def compose(self) -> ComposeResult:
        yield AppBar()
        _, model, direction, family = self.cell
        yield Static(f"{model} · {direction} · {family}", classes="section-title", markup=False)
        yield Static(interval_summary(self.interval), id="comparisons-summary", markup=False)
        yield DataTable(id="comparison-table", cursor_type="row", zebra_stripes=True)
        yield Static(RHO_NOTE, id="comparisons-note", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.load()
        self.query_one(DataTable).focus()

    @work(exclusive=True, exit_on_error=False)
    async def load(self) -> None:
        self.pairs = await host(self).read(pairs_for_cell, *self.cell)
        self.show()

    def show(self) -> None:
        table = self.query_one(DataTable)
        full = [pair_cells(p) for p in self.pairs]
        compact = [pair_cells(p, True) for p in self.pairs]
        layout = fit(COLUMNS, full, available_width(table, len(full)), compact)
        fill(
            table,
            layout,
            [c.key for c in COLUMNS],
            compact if layout.compact else full,
            [str(p.comparison.id) for p in self.pairs],
        )

    def on_resize(self, event: events.Resize) -> None:
        if self.pairs:
            self.call_after_refresh(self.show)

    def main_scrollable(self) -> Widget | None:
        return self.query_one(DataTable)

    @on(DataTable.RowSelected)
    def selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.open_comparison(int(event.row_key.value))  # type: ignore[attr-defined]
