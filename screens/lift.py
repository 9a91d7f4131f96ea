"""Lift tables: model × direction × family (ΔGM, T, H, N), solo P / GM / R(2), tiers;
drill down from any lift cell to the comparisons behind it (→ transfer inspector)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from screens.app_bar import AppBar
from screens.base import Changes, LiveScreen, host
from screens.render import VERDICT_STYLES, pct, rho_text, signed_pct, speedup_text
from storage import queries

# Small draw counts: the TUI shows tables; `mkb analyze` runs the full permutation tests.
TUI_DRAWS = {"permutation_draws": 200, "swap_draws": 100, "bootstrap_draws": 100}


def compute_report(db: Database, experiment_id: str | None) -> dict[str, Any] | None:
    from engine.analysis.outcomes import from_store
    from engine.analysis.report import AnalysisOptions, analyze

    if experiment_id is None:
        return None
    outcomes = from_store(db, experiment_id)
    return analyze(outcomes, AnalysisOptions(
        permutation_draws=TUI_DRAWS["permutation_draws"], swap_draws=TUI_DRAWS["swap_draws"],
        bootstrap_draws=TUI_DRAWS["bootstrap_draws"]))


def _cells(*values: Any) -> list[Text]:
    return [v if isinstance(v, Text) else Text(str(v), justify="right") for v in values]


def delta_text(value: Any) -> Text:
    style = "" if value is None else ("green" if value > 0 else "red" if value < 0 else "")
    return Text(signed_pct(value), style=style, justify="right")


class LiftScreen(LiveScreen):
    """Per-experiment analysis tables, recomputed when comparisons change."""

    CSS_PATH = "lift.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "refresh", "Recompute", id="lift.refresh"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.report: dict[str, Any] | None = None

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
        yield Footer()

    def on_mount(self) -> None:
        columns = {
            "lift-table": ("model", "direction", "family", "N", "ΔGM", "T", "H"),
            "solo-table": ("model", "DSL", "N", "P", "GM", "R(2)", "% SOL"),
            "tiers-table": ("model", "source vs solo", "N", "ΔGM", "T", "H"),
            "tier-grid-table": ("solo tier", "source tier", "N", "ΔGM", "T", "H"),
        }
        for table_id, names in columns.items():
            table = self.query_one(f"#{table_id}", DataTable)
            for name in names:
                table.add_column(name, key=name)
        host(self).changes.subscribe(self, self.on_changes)
        self.query_one("#lift-table", DataTable).focus()  # enter drills down at once
        self.load()

    @work(exclusive=True, group="lift-load", exit_on_error=False)
    async def load(self) -> None:
        app = host(self)
        self.report = await app.read(compute_report, app.experiment_id)
        self.show()

    def show(self) -> None:
        report = self.report
        banner = self.query_one("#lift-banner", Static)
        lift = self.query_one("#lift-table", DataTable)
        solo = self.query_one("#solo-table", DataTable)
        tiers = self.query_one("#tiers-table", DataTable)
        grid = self.query_one("#tier-grid-table", DataTable)
        for table in (lift, solo, tiers, grid):
            table.clear()
        exp = host(self).experiment_id
        if report is None:
            banner.update(Text("no experiment in this database yet", style="dim"))
            return
        label = Text(f"experiment {exp} · ")
        if report["preview"]:
            label.append("PREVIEW (CPU grading, not scored)", style="bold reverse yellow")
        else:
            label.append("scored")
        label.append(f" · {len(report['comparisons'])} resolved comparisons · enter: "
                     "comparisons behind a row")
        banner.update(label)
        for i, r in enumerate(report["lift"]):
            lift.add_row(*_cells(Text(r["model"]), Text(r["direction"]), Text(r["family"]),
                                 r["n"], delta_text(r["delta_gm"]), pct(r["help_rate"]),
                                 pct(r["harm_rate"])), key=str(i))
        for s in report["solo"]:
            sol = s.get("pct_sol_median")
            solo.add_row(*_cells(Text(s["model"]), Text(s["dsl"]), s["n"], pct(s["pass_rate"]),
                                 speedup_text(s["gm"]), pct(s["r2"]),
                                 Text("-" if sol is None else f"{sol:.1f}%")))
        for t in report["tiers"]["by_standing"]:
            tiers.add_row(*_cells(Text(t["model"]), Text(t["standing"]), t["n"],
                                  delta_text(t["delta_gm"]), pct(t["help_rate"]),
                                  pct(t["harm_rate"])))
        for t in report["tiers"]["by_solo_and_source_tier"]:
            grid.add_row(*_cells(Text(t["solo_tier"]), Text(t["source_tier"]), t["n"],
                                 delta_text(t["delta_gm"]), pct(t["help_rate"]),
                                 pct(t["harm_rate"])))

    def on_changes(self, changes: Changes) -> None:
        if changes.comparisons or changes.experiments:
            self.reload_or_defer()

    def action_refresh(self) -> None:
        self.load()

    @on(DataTable.RowSelected, "#lift-table")
    def lift_row_selected(self, event: DataTable.RowSelected) -> None:
        if self.report is None or event.row_key.value is None:
            return
        row = self.report["lift"][int(event.row_key.value)]
        exp = host(self).experiment_id
        if exp is None:
            return
        self.app.push_screen(ComparisonListScreen(exp, row["model"], row["direction"],
                                                  row["family"]))


def comparisons_for_cell(
    db: Database, experiment_id: str, model: str, direction: str, family: str
) -> list[queries.ComparisonRow]:
    return [c for c in queries.comparisons(db, experiment_id)
            if c.model == model and c.direction == direction and not c.variant
            and (family == "all" or c.family == family)]


class ComparisonListScreen(Screen[None]):
    """The comparisons behind one lift cell."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back", id="comparisons.back"),
    ]
    DEFAULT_CSS = "ComparisonListScreen DataTable { height: 1fr; }"

    def __init__(self, experiment_id: str, model: str, direction: str, family: str) -> None:
        super().__init__()
        self.cell = (experiment_id, model, direction, family)

    def compose(self) -> ComposeResult:
        yield AppBar()
        _, model, direction, family = self.cell
        yield Static(f"{model} · {direction} · {family}", classes="section-title", markup=False)
        yield DataTable(id="comparison-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name in ("id", "problem", "family", "rep", "ρ / verdict", "source", "baseline",
                     "treatment"):
            table.add_column(name, key=name)
        self.load()
        table.focus()

    @work(exclusive=True, exit_on_error=False)
    async def load(self) -> None:
        rows = await host(self).read(comparisons_for_cell, *self.cell)
        table = self.query_one(DataTable)
        table.clear()
        for c in rows:
            verdict = Text(c.verdict or "-", style=VERDICT_STYLES.get(c.verdict or "", ""))
            table.add_row(Text(str(c.id)), Text(c.problem_id), Text(c.family),
                          Text(str(c.replicate)), rho_text(c) if c.resolved else verdict,
                          Text(str(c.source_attempt_id)), Text(str(c.baseline_attempt_id)),
                          Text(str(c.treatment_attempt_id)), key=str(c.id))

    @on(DataTable.RowSelected)
    def selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.open_comparison(int(event.row_key.value))  # type: ignore[attr-defined]
