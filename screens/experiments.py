"""The Experiments view (``e`` on any main screen): every experiment of the store, where it
came from and where it was graded; enter shows one in every view, ``c`` compares an
experiment with its re-grade (a re-grade with its source), ``v`` with any experiment picked."""

from __future__ import annotations

from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

from screens.app_bar import AppBar
from screens.base import Changes, LiveScreen, host
from screens.compare import CompareScreen
from screens.experiment_picker import ExperimentPicker, fill_entries, read_entries


class ExperimentsScreen(LiveScreen):
    """Every experiment of the store; pick the one the views show, or compare two."""

    HELP = (
        "Every experiment of this database, newest first: where it came from (run here, "
        "restored from a bundle, a re-grade of another, an imported public MetaKernelBench run "
        "or Harbor job), its state, where it was graded (PREVIEW: CPU preview, never "
        "comparable with a GPU) and its re-grades. ● marks the experiment the views show. "
        "enter shows the experiment under the cursor in every view; c compares it with its "
        "newest re-grade (a re-grade with the experiment it re-grades); v compares it with an "
        "experiment you pick."
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back", id="experiments.back"),
        Binding("c", "compare_regrade", "Compare with re-grade", id="experiments.compare"),
        Binding("v", "compare_with", "Compare with…", id="experiments.versus"),
    ]
    DEFAULT_CSS = """
    ExperimentsScreen DataTable { height: 1fr; }
    ExperimentsScreen #experiments-note { height: auto; padding: 0 1; color: $text-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Static("Experiments", classes="section-title", markup=False)
        yield DataTable(id="experiments-table", cursor_type="row", zebra_stripes=True)
        yield Static(
            "enter: show in every view · c: compare with its re-grade · v: compare with…",
            id="experiments-note",
            markup=False,
        )
        yield Footer()

    def on_mount(self) -> None:
        host(self).changes.subscribe(self, self.on_changes)
        self.query_one(DataTable).focus()
        self.load()

    @work(exclusive=True, group="experiments-load", exit_on_error=False)
    async def load(self) -> None:
        self.entries = await host(self).read(read_entries)
        fill_entries(self.query_one(DataTable), self.entries, host(self).experiment_id)

    def on_changes(self, changes: Changes) -> None:
        if changes.experiments:
            self.reload_or_defer()

    def main_scrollable(self) -> Widget | None:
        return self.query_one(DataTable)

    def action_experiments(self) -> None:
        """Already here (the key that opens this view elsewhere)."""

    def cursor_entry(self) -> dict[str, Any] | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((e for e in self.entries if e["id"] == key), None)

    @on(DataTable.RowSelected)
    def selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.select_experiment(str(event.row_key.value))  # type: ignore[attr-defined]
            self.app.pop_screen()

    def action_compare_regrade(self) -> None:
        entry = self.cursor_entry()
        if entry is None:
            return
        if entry["regrade_of"]:
            self.app.push_screen(CompareScreen(entry["regrade_of"], entry["id"]))
        elif entry["regrades"]:
            self.app.push_screen(CompareScreen(entry["id"], entry["regrades"][0]))
        else:
            self.notify(
                f"{entry['id']} has no re-grade in this database (mkb regrade makes "
                "one); v compares it with any experiment",
                severity="warning",
            )

    def action_compare_with(self) -> None:
        entry = self.cursor_entry()
        if entry is None:
            return
        first = str(entry["id"])

        def chosen(second: str | None) -> None:
            if second:
                self.app.push_screen(CompareScreen(first, second))

        self.app.push_screen(ExperimentPicker(f"Compare {first} with", exclude=first), chosen)
