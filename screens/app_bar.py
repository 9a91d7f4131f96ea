"""A one-line title bar (Textual's Header races when screens are pushed and popped fast)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

# the App's mode keys, shown here so the footer keeps its room for the screen's own keys
MODE_KEYS = (("1", "attempts", "Attempts"), ("2", "lift", "Lift"), ("3", "launch", "Launch"),
             ("4", "rubric", "Rubric"))


def mode_keys(current: str | None) -> Text:
    """``1 Attempts  2 Lift  3 Launch  4 Rubric  ?/f1 help``, the current mode
    highlighted."""
    text = Text()
    for key, mode, label in MODE_KEYS:
        text.append(f" {key} ", style="bold")
        text.append(f"{label} ", style="reverse" if mode == current else "")
    text.append(" ?/f1 ", style="bold")
    text.append("help")
    return text


class AppBar(Static):
    """The app title and database, from the App's title and sub-title, and the mode keys
    (the current mode highlighted: a screen's ``MODE``, else the App's current mode)."""

    DEFAULT_CSS = """
    AppBar { height: 1; background: $panel; color: $foreground; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__(markup=False)

    def on_mount(self) -> None:
        text = Text(self.app.title, style="bold")
        if self.app.sub_title:
            text.append(f" — {self.app.sub_title}")
        text.append("  ")
        text.append_text(mode_keys(getattr(self.screen, "MODE", None) or self.app.current_mode))
        self.update(text)
