"""A one-line title bar (Textual's Header races when screens are pushed and popped fast)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class AppBar(Static):
    """The app title and database, from the App's title and sub-title."""

    DEFAULT_CSS = """
    AppBar { height: 1; background: $panel; color: $foreground; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__(markup=False)

    def on_mount(self) -> None:
        text = Text(self.app.title, style="bold")
        if self.app.sub_title:
            text.append(f" — {self.app.sub_title}")
        self.update(text)
