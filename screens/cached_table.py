"""A DataTable whose rendered cells survive updates of other cells and new pages.

Textual 8.2.8 keys every cached cell, row and line on one table-wide update counter, so a
single ``update_cell`` re-renders every visible cell, and a new page renders each of its
cells through Rich (about 500 cells at 160×50, ~0.1 ms each: tens of milliseconds on the
UI loop). :class:`CellCachedTable` caches rendered cells twice:

- per cell, keyed on that cell's own version: patching a few cells re-renders those cells
  only, and the rows' lines are joined again from the cached ones;
- per content (the text, its styles, the column width and the row's style), without the
  cell's position: a new page whose cells say what earlier cells said (models, states,
  arms, speedups) copies their segments and adds the position (Textual's ``row`` /
  ``column`` mouse meta) instead of rendering them again.

While it paints, the table's and its components' styles are worked out once, not once per
line. The lines are the ones a plain DataTable paints (``tests/tui/test_cached_table.py``
compares them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.css.styles import RenderStyles
from textual.geometry import Region, Size
from textual.renderables.styled import Styled
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

CellLines = list[list[Segment]]  # a rendered cell: lines of segments
CacheKey = tuple[Any, ...]


class PaintStyles:
    """A component's styles during one paint, with the rich style worked out once (Textual
    works it out from the DOM for every line it paints)."""

    def __init__(self, styles: RenderStyles) -> None:
        self._styles = styles
        self.rich_style = styles.rich_style

    def __getattr__(self, name: str) -> Any:
        return getattr(self._styles, name)


def text_key(cell: object) -> CacheKey | None:
    """What a plain ``Text`` cell renders from, or None for anything else (other
    renderables, and styles carrying meta, which would mix with the cell's position)."""
    if type(cell) is not Text:
        return None
    styles = [cell.style, *(span.style for span in cell.spans)]
    if any(isinstance(s, Style) and s._meta for s in styles):
        return None
    return (cell.plain, tuple(cell.spans), cell.style, cell.justify, cell.overflow,
            cell.no_wrap, cell.end, cell.tab_size)


def with_meta(lines: CellLines, meta: Style) -> CellLines:
    """``lines`` with ``meta`` added to every styled segment (unstyled padding stays so)."""
    return [[Segment(s.text, s.style if s.style is None else s.style + meta, s.control)
             for s in line] for line in lines]


class CellCachedTable(DataTable[Text]):
    """A DataTable whose cell renders are cached per cell and per content, so updating a
    cell repaints only that cell and a new page mostly reuses earlier renders."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # set before DataTable's own set-up, whose watchers already clear the caches
        self._cell_updates = 0  # update_cell calls: the rest of _update_count is structural
        self._cell_versions: dict[tuple[RowKey, ColumnKey], int] = {}
        self._placed_cells: LRUCache[CacheKey, CellLines] = LRUCache(2000)
        self._content_cells: LRUCache[CacheKey, CellLines] = LRUCache(2000)
        self._metas: dict[tuple[int, int], Style] = {}
        self._paint_memo: dict[Any, Any] | None = None  # styles, during one render_lines
        super().__init__(*args, **kwargs)

    def update_cell(
        self, row_key: RowKey | str, column_key: ColumnKey | str, value: Text, *,
        update_width: bool = False,
    ) -> None:
        super().update_cell(row_key, column_key, value, update_width=update_width)
        self._cell_updates += 1
        row = RowKey(row_key) if isinstance(row_key, str) else row_key
        column = ColumnKey(column_key) if isinstance(column_key, str) else column_key
        self._cell_versions[(row, column)] = self._cell_updates

    def _clear_caches(self) -> None:
        # the content cache stays: its key holds everything a cell's render depends on but
        # the stylesheet, whose changes come through notify_style_update
        super()._clear_caches()
        self._placed_cells.clear()
        self._cell_versions.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._placed_cells.clear()
        self._content_cells.clear()

    def render_lines(self, crop: Region) -> list[Strip]:
        """Paint with the table's and its components' styles worked out once per paint."""
        self._paint_memo = {}
        try:
            return super().render_lines(crop)
        finally:
            self._paint_memo = None

    @property
    def rich_style(self) -> Style:
        memo = self._paint_memo
        if memo is None:
            return super().rich_style
        if "rich_style" not in memo:
            memo["rich_style"] = super().rich_style
        return cast(Style, memo["rich_style"])

    def get_component_styles(self, *names: str) -> RenderStyles:
        memo = self._paint_memo
        if memo is None:
            return super().get_component_styles(*names)
        if names not in memo:
            memo[names] = PaintStyles(super().get_component_styles(*names))
        return cast(RenderStyles, memo[names])

    def _render_cell(
        self, row_index: int, column_index: int, base_style: Style, width: int,
        cursor: bool = False, hover: bool = False,
    ) -> CellLines:
        row_key = (self._header_row_key if row_index == -1
                   else self._row_locations.get_key(row_index))
        column_key = self._column_locations.get_key(column_index)
        version = self._cell_versions.get((row_key, column_key), 0)  # type: ignore[arg-type]
        key = (row_key, column_key, row_index, column_index, width, base_style, cursor,
               hover, self._show_hover_cursor, self._update_count - self._cell_updates,
               version, self._pseudo_class_state)
        lines = self._placed_cells.get(key)
        if lines is None:
            lines = self._render_placed(row_key, column_key, row_index, column_index,
                                        base_style, width, cursor, hover)
            self._placed_cells[key] = lines
        return lines

    def _render_placed(
        self, row_key: RowKey | None, column_key: ColumnKey | None, row_index: int,
        column_index: int, base_style: Style, width: int, cursor: bool, hover: bool,
    ) -> CellLines:
        content = self._plain_content(row_key, column_key, row_index, column_index,
                                      base_style)
        if content is None:
            lines: CellLines = super()._render_cell(row_index, column_index, base_style,
                                                    width, cursor, hover)
            return lines
        cell, content_key = content
        key = (content_key, width, base_style, cursor, hover, self._show_hover_cursor,
               self.show_cursor, self.cursor_foreground_priority,
               self.cursor_background_priority, self.cell_padding, self._pseudo_class_state)
        unplaced = self._content_cells.get(key)
        if unplaced is None:
            unplaced = self._render_unplaced(cell, base_style, width, cursor, hover)
            self._content_cells[key] = unplaced
        return with_meta(unplaced, self._meta(row_index, column_index))

    def _plain_content(
        self, row_key: RowKey | None, column_key: ColumnKey | None, row_index: int,
        column_index: int, base_style: Style,
    ) -> tuple[Text, CacheKey] | None:
        """The cell's Text and its content key when it renders like any equal cell: a
        one-line data cell outside the fixed rows and columns, on a style without meta."""
        if row_key is None or column_key is None or row_index < self.fixed_rows:
            return None
        if column_index < self.fixed_columns or base_style._meta:
            return None
        row = self.rows.get(row_key)
        if row is None or row.height != 1:
            return None
        cell = self._data.get(row_key, {}).get(column_key)
        content_key = text_key(cell)
        return None if content_key is None else (cell, content_key)  # type: ignore[return-value]

    def _render_unplaced(
        self, cell: Text, base_style: Style, width: int, cursor: bool, hover: bool
    ) -> CellLines:
        """Textual's rendering of a one-line data cell, without the position's meta."""
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
        padded = Padding(cell, (0, self.cell_padding))
        lines: CellLines = self.app.console.render_lines(
            Styled(padded, pre_style=base_style + component_style, post_style=post_style),
            options,
        )
        return lines

    def _meta(self, row_index: int, column_index: int) -> Style:
        meta = self._metas.get((row_index, column_index))
        if meta is None:
            meta = Style.from_meta({"row": row_index, "column": column_index})
            self._metas[(row_index, column_index)] = meta
        return meta

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """Measure the new rows only where a width or height depends on them: columns
        given a width (and one-line, unlabelled rows) need no measuring of 1,000 cells."""
        rows = list(new_rows)
        if self._needs_measuring(rows):
            super()._update_dimensions(rows)
            return
        widths = sum(column.get_render_width(self) for column in self.columns.values())
        header = self.header_height if self.show_header else 0
        self.virtual_size = Size(widths + self._row_label_column_width,
                                 self._total_row_height + header)

    def _needs_measuring(self, new_rows: list[RowKey]) -> bool:
        if any(column.auto_width for column in self.columns.values()):
            return True
        return any((row := self.rows.get(key)) is not None
                   and (row.label is not None or row.auto_height) for key in new_rows)
