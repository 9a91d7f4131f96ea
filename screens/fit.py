"""Fit a table's columns to the width it has, by priority, instead of cutting the right edge.

When the natural layout is too wide: short headers and compact cells first, then the columns
that matter least hidden (``drop`` up to ``drop_first``), then flexible columns (long names)
cut with an ellipsis down to their minimum, then the other droppable columns hidden, lowest
``drop`` first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import DataTable


@dataclass(frozen=True)
class Column:
    """One column: its key, header, short header and how it may give way."""

    key: str
    label: str
    short: str = ""  # header when space is short (default: the label)
    min_width: int = 0  # > 0: flexible, may shrink to this width with an ellipsis
    drop: int = 0  # > 0: may be hidden when nothing else fits, lowest first


@dataclass(frozen=True)
class Layout:
    """The columns shown (indices into the column list), their headers and widths."""

    shown: tuple[int, ...]
    headers: tuple[str, ...]
    widths: tuple[int, ...]
    compact: bool


Row = Sequence[Text]


def _natural(
    columns: Sequence[Column], rows: Sequence[Row], compact: bool
) -> tuple[list[str], list[int]]:
    headers = [(c.short or c.label) if compact else c.label for c in columns]
    widths = [
        max([Text(h).cell_len, *(r[i].cell_len for r in rows)]) for i, h in enumerate(headers)
    ]
    return headers, widths


def _shrink(columns: Sequence[Column], shown: list[int], widths: list[int], room: int) -> None:
    """Narrow the widest flexible column by one cell at a time until the row fits."""
    while sum(widths[i] for i in shown) > room:
        slack = [i for i in shown if columns[i].min_width and widths[i] > columns[i].min_width]
        if not slack:
            return
        widths[max(slack, key=lambda i: widths[i])] -= 1


def fit(
    columns: Sequence[Column],
    rows: Sequence[Row],
    width: int,
    compact_rows: Sequence[Row] | Callable[[], Sequence[Row]] | None = None,
    padding: int = 1,
    drop_first: int = 0,
) -> Layout:
    """The layout of ``rows`` (cells in ``columns`` order) within ``width`` cells; columns
    with ``0 < drop <= drop_first`` are hidden before any name is cut. ``compact_rows`` may
    be a function making them: it is called only when the natural layout is too wide."""
    pad = 2 * padding
    headers, widths = _natural(columns, rows, False)
    if sum(widths) + pad * len(widths) <= width:
        return Layout(tuple(range(len(columns))), tuple(headers), tuple(widths), False)
    if callable(compact_rows):
        compact_rows = compact_rows()
    headers, natural = _natural(columns, rows if compact_rows is None else compact_rows, True)
    order = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: columns[i].drop)
    shown = list(range(len(columns)))

    def fits(widths: list[int]) -> bool:
        return sum(widths[i] + pad for i in shown) <= width

    while order and columns[order[0]].drop <= drop_first and not fits(natural):
        shown.remove(order.pop(0))
    while True:
        widths = natural[:]
        _shrink(columns, shown, widths, width - pad * len(shown))
        if fits(widths) or not order:
            break
        shown.remove(order.pop(0))
    return Layout(
        tuple(shown), tuple(headers[i] for i in shown), tuple(widths[i] for i in shown), True
    )


def project(layout: Layout, row: Row) -> list[Text]:
    """The shown cells of ``row``, each cut to its column's width with an ellipsis (a cut
    cell is a copy; one that fits is the cell itself)."""
    out = []
    for i, width in zip(layout.shown, layout.widths, strict=True):
        cell = row[i]
        if cell.cell_len > width:
            cell = cell.copy()
            cell.truncate(width, overflow="ellipsis")
        out.append(cell)
    return out


def available_width(table: DataTable[Text], rows: int) -> int:
    """The cells a table can use for its columns: its width less a vertical scrollbar when
    ``rows`` (plus the header) overflow its height."""
    width = table.size.width or table.app.size.width
    height = table.size.height or table.app.size.height
    scrollbar = table.styles.scrollbar_size_vertical if rows + 1 > height else 0
    return max(1, width - scrollbar)


def fill(
    table: DataTable[Text],
    layout: Layout,
    keys: Sequence[str],
    rows: Sequence[Row],
    row_keys: Sequence[str] | None = None,
) -> None:
    """Rebuild ``table`` with ``layout``'s columns (``keys`` name every column) and rows."""
    fill_projected(table, layout, keys, [project(layout, row) for row in rows], row_keys)


def fill_projected(
    table: DataTable[Text],
    layout: Layout,
    keys: Sequence[str],
    cells: Sequence[Sequence[Text]],
    row_keys: Sequence[str] | None = None,
) -> None:
    """:func:`fill` with rows already cut to ``layout`` (:func:`project`)."""
    table.clear(columns=True)
    for i, header, width in zip(layout.shown, layout.headers, layout.widths, strict=True):
        table.add_column(header, key=keys[i], width=width)
    for n, row in enumerate(cells):
        table.add_row(*row, key=None if row_keys is None else row_keys[n])
