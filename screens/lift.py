"""Lift tables: model × direction × family (pairs, ρ̄ with its 95% interval, ΔGM, T, H),
solo P / GM / R(2), tiers, and a plot of ρ̄ with its interval per row; drill down from any
lift cell to the comparisons behind it (→ transfer inspector). Figures from CPU-preview
grading are dimmed and marked PREVIEW."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from screens.app_bar import AppBar
from screens.base import Changes, LiveScreen, host
from screens.comparisons import ComparisonListScreen
from screens.fit import Column, available_width, fill, fit
from screens.lift_cells import (
    LIFT_COLUMNS,
    RHO_HELP,
    RHO_NOTE,
    SOLO_COLUMNS,
    STANDING_COLUMNS,
    TIER_GRID_COLUMNS,
    add_intervals,
    lift_cells,
    solo_cells,
    tier_cells,
)
from screens.lift_noise import (
    BAND_COLUMNS,
    NOISE_COLUMNS,
    NOISE_HELP,
    band_cells,
    band_rows,
    noise_cells,
    noise_rows,
    power_text,
)
from screens.plots import PlotPanel, forest_caption, forest_rows
from screens.render import UNGRADED_STYLE

__all__ = ["ComparisonListScreen", "LiftScreen", "compute_report"]

# Small draw counts: the TUI shows tables; `mkb analyze` runs the full permutation tests.
TUI_DRAWS = {"permutation_draws": 200, "swap_draws": 100, "bootstrap_draws": 100}


def compute_report(
    db: Database, experiment_id: str | None, without_intervened: bool = False
) -> dict[str, Any] | None:
    """The analysis report of one experiment, ρ̄'s intervals added (on the reading thread);
    ``without_intervened`` leaves out attempts operators stopped, retried or extended."""
    from engine.analysis.outcomes import from_store
    from engine.analysis.report import AnalysisOptions, analyze

    if experiment_id is None:
        return None
    outcomes = from_store(db, experiment_id)
    report = analyze(
        outcomes,
        AnalysisOptions(
            permutation_draws=TUI_DRAWS["permutation_draws"],
            swap_draws=TUI_DRAWS["swap_draws"],
            bootstrap_draws=TUI_DRAWS["bootstrap_draws"],
            without_intervened=without_intervened,
        ),
    )
    return add_intervals(report, outcomes)


Cells = Callable[[dict[str, Any], bool], list[Text]]


def no_result_label(summary: dict[str, Any] | None) -> str:
    """The attempts and repeats the tables leave out as no result, by count and reason."""
    if not summary:
        return ""

    def by(reasons: dict[str, int]) -> str:
        return ", ".join(f"{reason} {n}" for reason, n in reasons.items())

    parts = []
    if summary["ungraded"]:
        parts.append(
            f"ungraded (grader's fault, not failures): {summary['ungraded']} "
            f"({by(summary['ungraded_by_reason'])})"
        )
    if summary["repeats_excluded"]:
        parts.append(
            f"repeats without a valid runtime: {summary['repeats_excluded']} "
            f"({by(summary['repeats_by_reason'])})"
        )
    return "left out · " + " · ".join(parts) if parts else ""


class LiftScreen(LiveScreen):
    """Per-experiment analysis tables, recomputed when comparisons change."""

    CSS_PATH = "lift.tcss"
    MODE = "lift"
    HELP = RHO_HELP + (
        " enter on a lift row lists the comparisons behind it; l / s / t / n switch tabs; p "
        "plots ρ̄ and its 95% CI per lift row (log₂ axis, a line at ρ = 1). i recomputes every "
        "table without the attempts operators stopped, retried or extended (and back). "
    ) + NOISE_HELP
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "tab('lift-tab')", "Lift", id="lift.tab_lift"),
        Binding("s", "tab('solo-tab')", "Solo", id="lift.tab_solo"),
        Binding("t", "tab('tiers-tab')", "Tiers", id="lift.tab_tiers"),
        Binding("n", "tab('noise-tab')", "Noise", id="lift.tab_noise"),
        Binding("p", "tab('plot-tab')", "Plot", id="lift.tab_plot"),
        Binding("r", "refresh", "Recompute", id="lift.refresh"),
        Binding("i", "toggle_intervened", "Without intervened attempts", show=False,
                id="lift.intervened"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.report: dict[str, Any] | None = None
        self._noise_filled = False  # the Noise tab shows the current report
        self.without_intervened = False  # i: the tables without intervened attempts

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Static(id="lift-banner", markup=False)
        with TabbedContent(initial="lift-tab", id="lift-tabs"):
            with TabPane("Lift", id="lift-tab"):
                yield DataTable(id="lift-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Solo", id="solo-tab"):
                yield DataTable(id="solo-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Tiers", id="tiers-tab"):
                yield DataTable(id="tiers-table", cursor_type="row", zebra_stripes=True)
                yield DataTable(id="tier-grid-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Noise", id="noise-tab"):
                yield DataTable(id="noise-table", cursor_type="row", zebra_stripes=True)
                yield Static(id="noise-power", markup=False)
                yield DataTable(id="band-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Plot", id="plot-tab"), VerticalScroll(id="forest-scroll"):
                yield PlotPanel(id="forest-plot")
        yield Static(RHO_NOTE, id="lift-note", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        host(self).changes.subscribe(self, self.on_changes)
        self.query_one("#lift-table", DataTable).focus()  # enter drills down at once
        self.load()

    @work(exclusive=True, group="lift-load", exit_on_error=False)
    async def load(self) -> None:
        app = host(self)
        self.report = await app.read(compute_report, app.experiment_id, self.without_intervened)
        self.show()

    def _fill(
        self,
        table_id: str,
        columns: Sequence[Column],
        rows: Sequence[dict[str, Any]],
        cells: Cells,
        keyed: bool = False,
    ) -> None:
        """Fit ``columns`` to the width the tables have, then fill one table."""
        table = self.query_one(f"#{table_id}", DataTable)
        full = [cells(r, False) for r in rows]
        compact = [cells(r, True) for r in rows]
        width = available_width(self.query_one("#lift-table", DataTable), len(rows))
        layout = fit(columns, full, width, compact)
        fill(
            table,
            layout,
            [c.key for c in columns],
            compact if layout.compact else full,
            [str(i) for i in range(len(rows))] if keyed else None,
        )

    def show(self) -> None:
        report = self.report
        banner = self.query_one("#lift-banner", Static)
        exp = host(self).experiment_id
        if report is None:
            for table in self.query(DataTable):
                table.clear()
            banner.update(Text("no experiment in this database yet", style="dim"))
            self.show_forest(None)
            return
        label = Text(f"experiment {exp} · ")
        if gpu := (report.get("experiment") or {}).get("gpu"):
            label.append(f"graded on {gpu} · ")
        if report["preview"]:
            label.append(
                "PREVIEW (CPU grading, not scored, not comparable)", style="bold reverse yellow"
            )
        else:
            label.append("scored")
        label.append(f" · {len(report['comparisons'])} resolved comparisons")
        label.append_text(operator_note(report))
        label.append(" · enter: comparisons behind a row")
        if left_out := no_result_label(report.get("no_result")):
            label.append(f"\n{left_out}", style=UNGRADED_STYLE)
        banner.update(label)
        tiers = report["tiers"]
        self._fill("lift-table", LIFT_COLUMNS, report["lift"], lift_cells, keyed=True)
        self._fill("solo-table", SOLO_COLUMNS, report["solo"], solo_cells)
        self._fill(
            "tiers-table",
            STANDING_COLUMNS,
            tiers["by_standing"],
            lambda r, c: tier_cells("model", "standing", r, c),
        )
        self._fill(
            "tier-grid-table",
            TIER_GRID_COLUMNS,
            tiers["by_solo_and_source_tier"],
            lambda r, c: tier_cells("solo_tier", "source_tier", r, c),
        )
        self._noise_filled = False
        self.show_noise()
        self.show_forest(report)

    @on(TabbedContent.TabActivated, "#lift-tabs")
    def show_noise(self) -> None:
        """Fill the Noise tab when it is shown (a hidden tab costs a redraw nothing): its
        lift rows now, the bands table on the next frame, so neither blocks the UI long."""
        report = self.report
        tabs = self.query_one(TabbedContent)
        if report is None or self._noise_filled or tabs.active != "noise-tab":
            return
        self._noise_filled = True
        preview = bool(report["preview"])
        self._fill("noise-table", NOISE_COLUMNS, noise_rows(report),
                   lambda r, c: noise_cells(r, c, preview))
        self.query_one("#noise-power", Static).update(power_text(report))
        self.call_after_refresh(
            self._fill, "band-table", BAND_COLUMNS, band_rows(report), band_cells
        )

    def show_forest(self, report: dict[str, Any] | None) -> None:
        """ρ̄ and its interval per lift row; taller than the tab, it scrolls."""
        rows = forest_rows(report)
        caption, placeholder = forest_caption(rows, bool(report and report["preview"]))
        if report is None:
            placeholder = "no experiment in this database yet"
        panel = self.query_one("#forest-plot", PlotPanel)
        plot = panel.show(caption, placeholder)
        if plot is not None:
            plot.styles.min_height = len(rows) + 4  # a line per row, the frame and the axis
            panel.styles.min_height = len(rows) + 7  # and the caption
            plot.draw_forest(rows)

    def on_resize(self, event: events.Resize) -> None:
        if self.report is not None:
            self.call_after_refresh(self.show)

    def on_changes(self, changes: Changes) -> None:
        if changes.comparisons or changes.experiments:
            self.reload_or_defer()

    def action_toggle_intervened(self) -> None:
        self.without_intervened = not self.without_intervened
        self.load()

    def action_refresh(self) -> None:
        self.load()

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        table = self.main_scrollable()
        if table is not None:
            table.focus()

    def main_scrollable(self) -> Widget | None:
        """The first table of the open tab (the plot's scroll view on the Plot tab)."""
        pane = self.query_one(TabbedContent).active_pane
        found = pane.query("DataTable, #forest-scroll") if pane is not None else None
        return found.first() if found else None

    @on(DataTable.RowSelected, "#lift-table")
    def lift_row_selected(self, event: DataTable.RowSelected) -> None:
        if self.report is None or event.row_key.value is None:
            return
        row = self.report["lift"][int(event.row_key.value)]
        exp = host(self).experiment_id
        if exp is None:
            return
        self.app.push_screen(
            ComparisonListScreen(
                exp, row["model"], row["direction"], row["family"], row.get("interval")
            )
        )


def operator_note(report: dict[str, Any]) -> Text:
    """Attempts operators excluded (how many, why) and comparisons they intervened on."""
    note = Text()
    exclusion = report["exclusion"]
    if exclusion.get("excluded"):
        why = ", ".join(exclusion.get("excluded_reasons") or {})
        note.append(f" · {exclusion['excluded']} excluded ({why})", style="bold yellow")
    if marked := sum(1 for c in report["comparisons"] if c.get("intervened")):
        note.append(f" · {marked} intervened", style="yellow")
    if exclusion.get("without_intervened"):
        note.append(" · WITHOUT intervened attempts (i)", style="bold yellow")
    return note
