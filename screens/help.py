"""The help screen (``?`` / F1): the keys of the screen it was opened on, generated from the
screens' and the App's ``BINDINGS`` (with any keymap applied), so it cannot drift from them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

OUR_MODULES = ("screens.", "app.")
Section = tuple[str, list[tuple[str, str]]]


def screen_title(screen: Screen[object]) -> str:
    """``AttemptDetailScreen`` → ``Attempt Detail``."""
    name = type(screen).__name__.removesuffix("Screen")
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name)


def declared_bindings(cls: type[DOMNode], ours: bool = True) -> list[Binding]:
    """The bindings ``cls`` and its bases declare (ours, or else Textual's), subclass first;
    a key bound again in a subclass is listed once."""
    seen: set[str] = set()
    out: list[Binding] = []
    for base in cls.__mro__:
        if base.__module__.startswith(OUR_MODULES) != ours or "BINDINGS" not in base.__dict__:
            continue
        declared: list[BindingType] = base.__dict__["BINDINGS"]
        for binding in Binding.make_bindings(declared):
            if binding.key not in seen:
                seen.add(binding.key)
                out.append(binding)
    return out


def key_rows(app: App[object], bindings: Iterable[Binding]) -> list[tuple[str, str]]:
    """(keys, description) per action, keys as the footer shows them, keymap applied."""
    keymap: dict[str, str] = getattr(app, "_keymap", {}) or {}  # Textual keeps it private
    rows: dict[tuple[str, str], list[str]] = {}
    for binding in bindings:
        if not binding.description or binding.system:
            continue
        keys = keymap.get(binding.id, binding.key) if binding.id else binding.key
        shown = rows.setdefault((binding.action, binding.description), [])
        for key in keys.split(","):
            display = app.get_key_display(dataclasses.replace(binding, key=key.strip()))
            if display not in shown:
                shown.append(display)
    return [(" / ".join(keys), description) for (_, description), keys in rows.items()]


def help_sections(screen: Screen[object], app: App[object]) -> list[Section]:
    """What the help screen lists for ``screen``: its keys, then the keys that work
    everywhere (the App's, the command palette) and focus keys."""
    sections: list[Section] = [
        (screen_title(screen), key_rows(app, declared_bindings(type(screen))))
    ]
    everywhere = key_rows(app, declared_bindings(type(app)) + declared_bindings(type(app), False))
    if app.ENABLE_COMMAND_PALETTE:
        palette = Binding(app.COMMAND_PALETTE_BINDING, "command_palette")
        everywhere.append(
            (
                app.get_key_display(palette),
                "Command palette: jump to an attempt, "
                "problem, comparison or experiment; change the theme",
            )
        )
    sections.append(("Everywhere", everywhere))
    focus = [b for b in declared_bindings(Screen, False) if "focus" in b.action]
    sections.append(("Focus", key_rows(app, focus)))
    return sections


def help_text(screen: Screen[object], app: App[object]) -> Text:
    """The help screen's body: the screen's note (its ``HELP``), then every section."""
    sections = help_sections(screen, app)
    width = max((Text(k).cell_len for _, rows in sections for k, _ in rows), default=1)
    text = Text()
    note = getattr(screen, "HELP", "")
    if note:
        text.append(note + "\n", style="italic")
    for title, rows in sections:
        text.append(f"\n{title}\n", style="bold")
        for keys, description in rows:
            text.append(f"  {keys:<{width}}  ", style="bold")
            text.append(f"{description}\n")
    return text


class HelpScreen(ModalScreen[None]):
    """The keys of the screen below; escape, ``?`` or F1 closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 90%; max-width: 100; height: 90%; border: thick $primary;
                            background: $surface; padding: 0 1; }
    HelpScreen #help-title { text-style: bold; color: $primary; height: 1; }
    HelpScreen VerticalScroll { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [  # a modal screen: the App's keys stop here
        Binding("escape,question_mark,f1", "dismiss", "Close", id="help.close"),
    ]

    def __init__(self, screen: Screen[object]) -> None:
        super().__init__()
        self.of = screen

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Keys: {screen_title(self.of)}", id="help-title", markup=False)
            with VerticalScroll():
                yield Static(help_text(self.of, self.app), id="help-text", markup=False)

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()
