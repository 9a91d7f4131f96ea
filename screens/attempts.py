"""The Attempts screen: a live, filterable, sortable table paged in SQL.

Only one page (``PAGE_SIZE`` rows) is ever in the DataTable; filtering, sorting and
counting happen in SQLite, so 10,000 attempts cost the same as 100. Live changes re-read the
visible page and patch changed cells (keyed by attempt id) instead of rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Input, Static
from textual.widgets.data_table import RowKey

from screens.app_bar import AppBar
from screens.base import Changes, LiveScreen, host
from screens.filters import parse_filter
from screens.render import ATTEMPT_COLUMNS, SORTABLE, attempt_cells
from storage import queries

PAGE_SIZE = 100
SORT_CYCLE = ("id", "model", "problem_id", "state", "best_speedup", "submissions_used",
              "started_at")
STATE_COLUMN = [key for key, _ in ATTEMPT_COLUMNS].index("state")
UNSAFE_MARK = "UNSAFE"


def row_cells(row: queries.AttemptRow, now: Any) -> tuple[Text, ...]:
    """A row's cells; an attempt whose sandbox ran without the agent jail says UNSAFE."""
    cells = attempt_cells(row, now)
    if not row.unsafe_no_jail:
        return cells
    state = cells[STATE_COLUMN].copy()
    state.append(f" {UNSAFE_MARK}", style="bold reverse red")
    return (*cells[:STATE_COLUMN], state, *cells[STATE_COLUMN + 1:])


def load_page(
    db: Database, experiment_id: str | None, filters: queries.AttemptFilters,
    search: str | None, sort: str, descending: bool, limit: int, offset: int,
) -> tuple[list[queries.AttemptRow], int]:
    """One page plus the filtered total (one read, one snapshot)."""
    total = queries.count_attempts(db, experiment_id=experiment_id, filters=filters,
                                   search=search)
    rows = queries.attempts_page(db, experiment_id=experiment_id, filters=filters, search=search,
                                 sort=sort, descending=descending, limit=limit, offset=offset)
    return rows, total


class AttemptTable(DataTable[Text]):
    """The attempts of one page, keyed by attempt id."""

    DEFAULT_CSS = "AttemptTable { height: 1fr; }"

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for key, label in ATTEMPT_COLUMNS:
            self.add_column(label, key=key)

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        # Textual 8.2.8 caches rendered rows and lines without their column widths: a page
        # painted before the columns were measured (on idle) stayed cut to the headers'
        # widths. Measuring now drops what was rendered with the old widths.
        super()._update_dimensions(new_rows)
        self._clear_caches()
        self.refresh()


class AttemptsScreen(LiveScreen):
    """All attempts of the current experiment, live."""

    CSS_PATH = "attempts.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_filter", "Filter", id="attempts.filter"),
        Binding("escape", "focus_table", "Table", show=False, id="attempts.table"),
        Binding("s", "cycle_sort", "Sort", id="attempts.sort"),
        Binding("r", "reverse_sort", "Reverse", id="attempts.reverse"),
        Binding("right_square_bracket", "page(1)", "Next page", id="attempts.next_page"),
        Binding("left_square_bracket", "page(-1)", "Prev page", id="attempts.prev_page"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""
        self.sort = "id"
        self.descending = False
        self.page_offset = 0
        self.total = 0
        self.rows: list[queries.AttemptRow] = []
        self._cells: dict[int, tuple[Text, ...]] = {}
        self.loads = 0

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Input(placeholder="filter: state:running model:NAME problem:p28 dsl:cute, or text",
                    id="attempt-filter")
        yield AttemptTable(id="attempt-table")
        yield Static(id="attempt-status", markup=False)
        yield Footer()

    @property
    def table(self) -> AttemptTable:
        return self.query_one(AttemptTable)

    def on_mount(self) -> None:
        host(self).changes.subscribe(self, self.on_changes)
        self.set_interval(1.0, self.tick_elapsed, name="elapsed")
        self.table.focus()
        self.load()

    # -- data ------------------------------------------------------------------------------
    @work(exclusive=True, group="attempts-load", exit_on_error=False)
    async def load(self) -> None:
        filters, search = parse_filter(self.filter_text)
        app = host(self)
        try:
            rows, total = await app.read(load_page, app.experiment_id, filters, search,
                                         self.sort, self.descending, PAGE_SIZE, self.page_offset)
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        if rows == [] and self.page_offset and total:
            self.page_offset = max(0, (total - 1) // PAGE_SIZE * PAGE_SIZE)
            self.load()
            return
        self.show(rows, total)

    def show(self, rows: list[queries.AttemptRow], total: int) -> None:
        """Put a page on screen: patch cells when the same rows are shown, else rebuild."""
        self.loads += 1
        table = self.table
        now = host(self).now()
        cells = {r.id: row_cells(r, now) for r in rows}
        same = [r.id for r in rows] == [r.id for r in self.rows]
        with self.app.batch_update():
            if same:
                for r in rows:
                    old = self._cells.get(r.id)
                    for (key, _), new, before in zip(ATTEMPT_COLUMNS, cells[r.id],
                                                     old or (None,) * len(ATTEMPT_COLUMNS)):
                        if new != before:
                            table.update_cell(str(r.id), key, new, update_width=True)
            else:
                cursor = table.cursor_row
                table.clear()
                for r in rows:
                    table.add_row(*cells[r.id], key=str(r.id))
                if rows:
                    table.move_cursor(row=min(cursor, len(rows) - 1), animate=False)
        self.rows, self._cells, self.total = rows, cells, total
        self.update_status()

    def update_status(self) -> None:
        pages = max(1, -(-self.total // PAGE_SIZE))
        page = self.page_offset // PAGE_SIZE + 1
        arrow = "↓" if self.descending else "↑"
        app = host(self)
        exp = app.experiment_id or "all experiments"
        grading = app.grading_status()
        self.query_one("#attempt-status", Static).update(
            f"{exp} · {self.total} attempts · page {page}/{pages} · sort {self.sort} {arrow}"
            + (f" · filter {self.filter_text!r}" if self.filter_text else "")
            + (f" · {grading}" if grading else "")
        )

    def tick_elapsed(self) -> None:
        """Advance the elapsed clock of running attempts (and the grading line) without a
        query."""
        if host(self).grading_status() is not None:
            self.update_status()
        now = host(self).now()
        table = self.table
        for r in self.rows:
            if r.state in ("running", "final_eval") and r.started_at:
                cell = attempt_cells(r, now)[6]
                if cell != self._cells[r.id][6]:
                    table.update_cell(str(r.id), "elapsed", cell, update_width=True)
                    self._cells[r.id] = (*self._cells[r.id][:6], cell, *self._cells[r.id][7:])

    def on_changes(self, changes: Changes) -> None:
        if changes.attempts:
            self.reload_or_defer()

    # -- interaction -----------------------------------------------------------------------
    @on(Input.Changed, "#attempt-filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.page_offset = 0
        self.load()

    @on(Input.Submitted, "#attempt-filter")
    def filter_submitted(self) -> None:
        self.table.focus()

    @on(DataTable.RowSelected, "#attempt-table")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app_call("open_attempt", int(event.row_key.value))

    @on(DataTable.HeaderSelected, "#attempt-table")
    def header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key not in SORTABLE:
            return
        if key == self.sort:
            self.descending = not self.descending
        else:
            self.sort, self.descending = key, key == "best_speedup"
        self.page_offset = 0
        self.load()

    def app_call(self, name: str, *args: Any) -> None:
        getattr(self.app, name)(*args)

    def set_filter(self, text: str) -> None:
        self.query_one("#attempt-filter", Input).value = text  # Input.Changed reloads

    def action_focus_filter(self) -> None:
        self.query_one("#attempt-filter", Input).focus()

    def action_focus_table(self) -> None:
        self.table.focus()

    def action_cycle_sort(self) -> None:
        index = SORT_CYCLE.index(self.sort) if self.sort in SORT_CYCLE else -1
        self.sort = SORT_CYCLE[(index + 1) % len(SORT_CYCLE)]
        self.descending = self.sort == "best_speedup"
        self.page_offset = 0
        self.load()

    def action_reverse_sort(self) -> None:
        self.descending = not self.descending
        self.load()

    def action_page(self, delta: int) -> None:
        last = max(0, (self.total - 1) // PAGE_SIZE * PAGE_SIZE)
        offset = min(max(0, self.page_offset + delta * PAGE_SIZE), last)
        if offset != self.page_offset:
            self.page_offset = offset
            self.load()
