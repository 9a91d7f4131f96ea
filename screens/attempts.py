"""The Attempts screen: a live, filterable, sortable table paged in SQL.

Only one page (``PAGE_SIZE`` rows) is ever in the DataTable; filtering, sorting and
counting happen in SQLite, so 10,000 attempts cost the same as 100. Live changes re-read the
visible page and patch changed cells (keyed by attempt id) instead of rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any, ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Input, Static
from textual.widgets.data_table import RowKey
from textual.worker import Worker

from screens.app_bar import AppBar
from screens.attempt_actions import action_bindings, ask_action, ask_menu
from screens.base import Changes, LiveScreen, host
from screens.cached_table import CellCachedTable
from screens.filters import parse_filter
from screens.fit import Column, Layout, available_width, fill_projected, fit, project
from screens.render import ATTEMPT_COLUMNS, SORTABLE, attempt_cells
from storage import queries

PAGE_SIZE = 100
SORT_CYCLE = ("id", "model", "problem_id", "state", "best_speedup", "speedup",
              "submissions_used", "started_at")
DESCENDING_FIRST = {"best_speedup", "speedup"}
STATE_COLUMN = [key for key, _ in ATTEMPT_COLUMNS].index("state")
UNSAFE_MARK = "UNSAFE"
# How each column gives way in a narrow terminal: DSL goes first (the arm names it), then
# the id; then model and arm names shrink with an ellipsis; then the clock and the
# submission count go. The state (with its UNSAFE mark) is never cut.
FIT: dict[str, Column] = {
    "id": Column("id", "id", drop=2),
    "model": Column("model", "model", min_width=8),
    "problem_id": Column("problem_id", "problem"),
    "dsl": Column("dsl", "DSL", drop=1),
    "arm": Column("arm", "arm", min_width=9),
    "state": Column("state", "state"),
    "elapsed": Column("elapsed", "elapsed / budget", short="elapsed", drop=3),
    "submissions_used": Column("submissions_used", "subs", drop=4),
    "speedup": Column("speedup", "final"),
    "best_speedup": Column("best_speedup", "best"),
}
COLUMNS = tuple(FIT[key] for key, _ in ATTEMPT_COLUMNS)
KEYS = tuple(key for key, _ in ATTEMPT_COLUMNS)


def row_cells(row: queries.AttemptRow, now: Any, compact: bool = False) -> tuple[Text, ...]:
    """A row's cells; an attempt whose sandbox ran without the agent jail says UNSAFE."""
    cells = attempt_cells(row, now, compact)
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


class AttemptTable(CellCachedTable):
    """The attempts of one page, keyed by attempt id; paging past its first or last row
    turns the SQL page."""

    DEFAULT_CSS = "AttemptTable { height: 1fr; }"

    class PastEdge(Message):
        """PageDown on the last row (``direction`` 1) or PageUp on the first (-1)."""

        def __init__(self, direction: int) -> None:
            super().__init__()
            self.direction = direction

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True

    def action_page_down(self) -> None:
        if self.row_count and self.cursor_row >= self.row_count - 1:
            self.post_message(self.PastEdge(1))
        else:
            super().action_page_down()

    def action_page_up(self) -> None:
        if self.row_count and self.cursor_row <= 0:
            self.post_message(self.PastEdge(-1))
        else:
            super().action_page_up()

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
    MODE = "attempts"
    HELP = ("Filter with key:value tokens (state:running model:gpt problem:p28 dsl:cute "
            "arm:… outcome:… family:…) plus free text. final is the final evaluation's "
            "speedup (what the paper scores), best the best submission's. PageUp / PageDown "
            "past the first or last row turn the page. In a narrow terminal, names shorten "
            "(done:pass, cute→tirx, ed:1a2b, no provider/), DSL and id hide, long names are "
            "cut (…), then elapsed and subs hide.")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_filter", "Filter", id="attempts.filter"),
        Binding("escape", "focus_table", "Table", show=False, id="attempts.table"),
        Binding("s", "cycle_sort", "Sort", id="attempts.sort"),
        Binding("r", "reverse_sort", "Reverse", id="attempts.reverse"),
        Binding("right_square_bracket", "page(1)", "Next page", id="attempts.next_page"),
        Binding("left_square_bracket", "page(-1)", "Prev page", id="attempts.prev_page"),
        *action_bindings("attempts"),  # on the selected attempt (screens/attempt_actions.py)
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""
        self.sort = "id"
        self.descending = False
        self.page_offset = 0
        self.total = 0
        self.rows: list[queries.AttemptRow] = []
        self._cells: dict[int, tuple[Text, ...]] = {}  # the cells shown, per attempt id
        self.table_layout: Layout | None = None
        self._cursor_to: int | None = None  # after turning the page: 0 first row, -1 last
        self._status: Text | None = None  # the status line shown
        self._reader: Worker[None] | None = None  # the latest worker reading pages
        self._generation = 0  # which worker reads: a request for another page starts one
        self._reading: tuple[str | None, str, str, bool, int] | None = None  # its query
        self._reload = False  # read the page (again) when the running read returns
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
        self.watch(self.app, "engine_state", lambda _: self.update_status(), init=False)
        self.table.focus()
        self.load()

    # -- data ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the page asked for (again). A request for the page being read (a change
        set) reads it once more when that read returns, instead of cancelling it; a request
        for another page (a key, a filter) reads that page at once. A result for a page no
        longer asked for is never shown."""
        self._reload = True
        reading = self._reader is not None and not self._reader.is_finished
        if not reading or self._reading != self._query():
            self._generation += 1
            self._reader = self._read_pages(self._generation)

    @work(group="attempts-load", exit_on_error=False)
    async def _read_pages(self, generation: int) -> None:
        """Read while asked to, until a later call of :meth:`load` takes over."""
        while self._reload and generation == self._generation:
            self._reload = False
            await self._read_page()

    def _query(self) -> tuple[str | None, str, str, bool, int]:
        """What the page shown depends on: experiment, filter, sort and offset."""
        return (host(self).experiment_id, self.filter_text, self.sort, self.descending,
                self.page_offset)

    async def _read_page(self) -> None:
        query = self._reading = self._query()
        experiment_id, text, sort, descending, offset = query
        filters, search = parse_filter(text)
        try:
            rows, total = await host(self).read(load_page, experiment_id, filters, search,
                                                sort, descending, PAGE_SIZE, offset)
        except ValueError as exc:
            if query == self._query():
                self.notify(str(exc), severity="error")
            return
        if query != self._query():
            return  # another page was asked for meanwhile, and is being read
        if rows == [] and offset and total:  # past the end: the last page
            self.page_offset = max(0, (total - 1) // PAGE_SIZE * PAGE_SIZE)
            self._reload = True
        else:
            self.show(rows, total)

    def show(self, rows: list[queries.AttemptRow], total: int) -> None:
        """Put a page on screen: patch cells when the same rows are shown, else rebuild."""
        self.loads += 1
        self.render_rows(rows)
        self.total = total
        self.update_status()

    def render_rows(self, rows: list[queries.AttemptRow]) -> None:
        """Fit the columns to the table's width, then patch the cells that changed (same
        rows, same layout) or rebuild the table."""
        layout, cells = self._fit_rows(rows)
        same = layout == self.table_layout and [r.id for r in rows] == [r.id for r in self.rows]
        with self.app.batch_update():
            if same:
                self._patch(rows, layout, cells)
            else:
                self._rebuild(rows, layout, cells)
        self.rows, self._cells, self.table_layout = rows, cells, layout

    def _fit_rows(
        self, rows: list[queries.AttemptRow]
    ) -> tuple[Layout, dict[int, tuple[Text, ...]]]:
        """The layout for ``rows`` at the table's width and each row's cells cut to it (the
        compact cells are made only when the full ones do not fit)."""
        now = host(self).now()
        full = [row_cells(r, now) for r in rows]
        compact = cache(lambda: [row_cells(r, now, compact=True) for r in rows])
        layout = fit(COLUMNS, full, available_width(self.table, len(rows)), compact,
                     drop_first=2)
        chosen = compact() if layout.compact else full
        return layout, {r.id: tuple(project(layout, c)) for r, c in zip(rows, chosen,
                                                                        strict=True)}

    def _patch(self, rows: list[queries.AttemptRow], layout: Layout,
               cells: dict[int, tuple[Text, ...]]) -> None:
        """Update the cells that differ from the ones shown (same rows, same layout)."""
        keys = [KEYS[i] for i in layout.shown]
        table = self.table
        for r in rows:
            for key, new, before in zip(keys, cells[r.id], self._cells[r.id], strict=True):
                if new != before:
                    table.update_cell(str(r.id), key, new)

    def _rebuild(self, rows: list[queries.AttemptRow], layout: Layout,
                 cells: dict[int, tuple[Text, ...]]) -> None:
        """Fill the table with ``rows``, keeping the cursor's row (or the page turn's)."""
        table = self.table
        cursor = table.cursor_row
        fill_projected(table, layout, KEYS, [cells[r.id] for r in rows],
                       [str(r.id) for r in rows])
        if self._cursor_to is not None:
            cursor, self._cursor_to = self._cursor_to % max(1, len(rows)), None
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1), animate=False)

    def update_status(self) -> None:
        pages = max(1, -(-self.total // PAGE_SIZE))
        page = self.page_offset // PAGE_SIZE + 1
        arrow = "↓" if self.descending else "↑"
        app = host(self)
        exp = app.experiment_id or "all experiments"
        grading = app.grading_status()
        status = Text(
            f"{exp} · {self.total} attempts · page {page}/{pages} · sort {self.sort} {arrow}"
            + (f" · filter {self.filter_text!r}" if self.filter_text else "")
            + (f" · {grading}" if grading else "")
        )
        if getattr(self.app, "engine_state", "idle") == "paused":
            status.append(" · PAUSED: no new attempts start (Launch, ctrl+t resumes)",
                          style="bold yellow")
        if status != self._status:  # one line high (attempts.tcss): no layout to redo
            self._status = status
            self.query_one("#attempt-status", Static).update(status, layout=False)

    def tick_elapsed(self) -> None:
        """Advance the elapsed clock of running attempts (and the grading line) without a
        query."""
        if host(self).grading_status() is not None:
            self.update_status()
        if any(r.state in ("running", "final_eval") and r.started_at for r in self.rows):
            self.render_rows(self.rows)

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self._refit)

    def _refit(self) -> None:
        """Fit the page shown when the callback runs (a load may have replaced it)."""
        if self.rows:
            self.render_rows(self.rows)

    def main_scrollable(self) -> Widget | None:
        return self.table

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
            self.sort, self.descending = key, key in DESCENDING_FIRST
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
        self.descending = self.sort in DESCENDING_FIRST
        self.page_offset = 0
        self.load()

    def selected_row(self) -> queries.AttemptRow | None:
        row = self.table.cursor_row
        return self.rows[row] if 0 <= row < len(self.rows) else None

    def selected_id(self) -> int | None:
        row = self.selected_row()
        return row.id if row else None

    def action_act(self, action: str) -> None:
        """Stop, retry, extend, note, exclude or include the attempt under the cursor."""
        ask_action(self, action, self.selected_id(), self.selected_row())

    def action_act_menu(self) -> None:
        ask_menu(self, self.selected_id(), self.selected_row())

    def action_reverse_sort(self) -> None:
        self.descending = not self.descending
        self.load()

    @on(AttemptTable.PastEdge)
    def turn_page(self, event: AttemptTable.PastEdge) -> None:
        before = self.page_offset
        self.action_page(event.direction)
        if self.page_offset != before:
            self._cursor_to = 0 if event.direction > 0 else -1

    def action_page(self, delta: int) -> None:
        last = max(0, (self.total - 1) // PAGE_SIZE * PAGE_SIZE)
        offset = min(max(0, self.page_offset + delta * PAGE_SIZE), last)
        if offset != self.page_offset:
            self.page_offset = offset
            self.load()
