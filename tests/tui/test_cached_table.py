"""CellCachedTable paints every cell and line as Textual's DataTable does, and repaints a
patched cell (and only it) with its new content."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from screens.cached_table import CellCachedTable

CELLS = [
    Text("42", justify="right"),
    Text("model-3"),
    Text("done:pass", style="green"),
    Text("running UNSAFE", spans=[]),
    Text("cute2tirx_skill edited:1a2b3c4d"),
    Text("1.23×", style="bold", justify="right"),
]


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CellCachedTable(zebra_stripes=True, cursor_type="row")


class TwinApp(App[None]):
    """A plain DataTable and a CellCachedTable side by side, the same size."""

    CSS = "DataTable { width: 1fr; height: 12; }"

    def compose(self) -> ComposeResult:
        yield DataTable(zebra_stripes=True, cursor_type="row", id="plain")
        yield CellCachedTable(zebra_stripes=True, cursor_type="row", id="cached")


def segments(lines: Any) -> list[list[tuple[str, Any, Any]]]:
    """Segments with their styles' hash identity (colors, attributes, links and meta)."""
    return [[(s.text, s.style, s.style.meta if s.style else None) for s in line]
            for line in lines]


def textual_cells(table: CellCachedTable) -> list[list[Any]]:
    """Every visible cell as Textual's own ``_render_cell`` renders it."""
    base = table.rich_style
    out = []
    for row_index in range(table.row_count):
        style = table._get_row_style(row_index, base)
        out.append([segments(DataTable._render_cell(
            table, row_index, column_index, style, column.get_render_width(table),
            cursor=row_index == table.cursor_row))
            for column_index, column in enumerate(table.ordered_columns)])
    return out


def cached_cells(table: CellCachedTable) -> list[list[Any]]:
    base = table.rich_style
    out = []
    for row_index in range(table.row_count):
        style = table._get_row_style(row_index, base)
        out.append([segments(table._render_cell(
            row_index, column_index, style, column.get_render_width(table),
            cursor=row_index == table.cursor_row))
            for column_index, column in enumerate(table.ordered_columns)])
    return out


async def test_cells_render_as_textual_renders_them() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(CellCachedTable)
        for n, width in enumerate((4, 8, 10, 16, 12, 7)):
            table.add_column(f"c{n}", key=f"c{n}", width=width)
        for row in range(8):  # repeated contents: the second of each comes from the cache
            cells = [CELLS[(row + i) % len(CELLS)].copy() for i in range(6)]
            table.add_row(*cells, key=str(row))
        await pilot.pause()
        first = cached_cells(table)
        assert first == textual_cells(table)
        assert cached_cells(table) == first  # cached
        assert all(seg[2] and seg[2]["row"] == r for r, row in enumerate(first)
                   for cell in row for line in cell for seg in line if seg[1])


async def test_a_patched_cell_shows_its_new_content_and_others_stay_cached() -> None:
    app = TableApp()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(CellCachedTable)
        table.add_column("a", key="a", width=8)
        table.add_column("b", key="b", width=8)
        table.add_row(Text("x"), Text("y"), key="1")
        table.add_row(Text("x"), Text("y"), key="2")
        await pilot.pause()
        before = cached_cells(table)
        kept = table._render_cell(1, 1, table._get_row_style(1, table.rich_style), 8)
        table.update_cell("1", "b", Text("z", style="red"))
        after = cached_cells(table)
        assert after == textual_cells(table)
        assert after[0][1] != before[0][1] and after[1] == before[1]
        assert table._render_cell(1, 1, table._get_row_style(1, table.rich_style), 8) is kept
        assert [s.text for s in table.render_line(1)] != []  # paints
        assert "z" in "".join(s.text for s in table.render_line(1) if isinstance(s, Segment))


def painted(table: DataTable[Any]) -> list[list[tuple[str, Any, Any]]]:
    lines = table.render_lines(table.size.region)
    return [[(s.text, s.style, s.style.meta if s.style else None) for s in line]
            for line in lines]


async def test_lines_paint_as_a_plain_datatable_paints_them() -> None:
    app = TwinApp()
    async with app.run_test(size=(100, 30)) as pilot:
        tables = [app.query_one("#plain", DataTable), app.query_one("#cached", DataTable)]
        for table in tables:
            for n, width in enumerate((4, 8, 10, 16, 12, 7)):
                table.add_column(f"c{n}", key=f"c{n}", width=width)
            for row in range(15):
                table.add_row(*[CELLS[(row + i) % len(CELLS)].copy() for i in range(6)],
                              key=str(row))
        for table in tables:
            table.move_cursor(row=3)
        app.set_focus(None)
        await pilot.pause()
        assert painted(tables[1]) == painted(tables[0])
        for table in tables:
            table.update_cell("4", "c2", Text("patched", style="bold red"))
            table.move_cursor(row=5)
        await pilot.pause()
        assert painted(tables[1]) == painted(tables[0])
        focused = []
        for table in tables:  # each painted with the focus (its cursor and header change)
            table.focus()
            await pilot.pause()
            focused.append(painted(table))
        assert focused[1] == focused[0] and focused[0] != painted(tables[0])
