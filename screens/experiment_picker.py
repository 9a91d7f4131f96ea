"""The experiments of the store as table rows (id, name, where from, state, where graded,
re-grades), and a small modal picker of one of them (the Compare view's second side)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from screens.base import host

ENTRY_COLUMNS = ("id", "name", "from", "state", "graded on", "attempts", "re-grade")
PREVIEW_STYLE = "bold reverse yellow"


def read_entries(db: Any) -> list[dict[str, Any]]:
    """Every experiment, newest first, with its origin, devices and re-grade links."""
    from engine.analysis.sides import experiment_entries

    return experiment_entries(db)


def grading_cell(entry: dict[str, Any]) -> Text:
    """Where it was graded; CPU preview marked PREVIEW (never comparable with a GPU)."""
    devices = ", ".join(entry["devices"]) or f"{entry['gpu']} (target; nothing graded)"
    if entry["preview"]:
        return Text(f"PREVIEW {devices}", style=PREVIEW_STYLE)
    return Text(devices)


def link_cell(entry: dict[str, Any]) -> Text:
    if entry["regrades"]:
        more = f" (+{len(entry['regrades']) - 1})" if len(entry["regrades"]) > 1 else ""
        return Text(f"{entry['regrades'][0]}{more}", style="bold")
    if entry["regrade_of"]:
        return Text(f"of {entry['regrade_of']}", style="bold")
    return Text("-", style="dim")


def entry_cells(entry: dict[str, Any], current: str | None) -> list[Text]:
    """A row's cells in ``ENTRY_COLUMNS`` order; the experiment the views show marked ●."""
    mark = "● " if entry["id"] == current else "  "
    return [
        Text(mark + entry["id"], style="bold" if entry["id"] == current else ""),
        Text(entry["name"]),
        Text(entry["from"]),
        Text(entry["state"]),
        grading_cell(entry),
        Text(str(entry["attempts"]), justify="right"),
        link_cell(entry),
    ]


def fill_entries(table: DataTable[Any], entries: list[dict[str, Any]], current: str | None) -> None:
    """The table's rows, keyed by experiment id (the cursor kept on its experiment)."""
    keep = None
    if table.row_count:
        keep = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    table.clear(columns=True)
    table.add_columns(*ENTRY_COLUMNS)
    for entry in entries:
        table.add_row(*entry_cells(entry, current), key=entry["id"])
    ids = [e["id"] for e in entries]
    if keep in ids:
        table.move_cursor(row=ids.index(keep))


class ExperimentPicker(ModalScreen[str | None]):
    """Pick one experiment (enter); escape cancels. ``exclude`` is left out of the list."""

    DEFAULT_CSS = """
    ExperimentPicker { align: center middle; }
    ExperimentPicker > Vertical { width: 90%; max-width: 140; height: 70%;
                                  border: thick $primary; background: $surface; padding: 0 1; }
    ExperimentPicker #picker-title { text-style: bold; color: $primary; height: auto; }
    ExperimentPicker DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Cancel", id="picker.cancel"),
    ]

    def __init__(self, title: str, exclude: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.exclude = exclude
        self.entries: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"{self.title_text} (enter picks, escape cancels)", id="picker-title", markup=False
            )
            yield DataTable(id="picker-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.load()

    @work(exclusive=True, exit_on_error=False)
    async def load(self) -> None:
        entries = await host(self).read(read_entries)
        self.entries = [e for e in entries if e["id"] != self.exclude]
        fill_entries(self.query_one(DataTable), self.entries, host(self).experiment_id)

    @on(DataTable.RowSelected)
    def picked(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.dismiss(str(event.row_key.value))
