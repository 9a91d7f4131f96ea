"""Operators' actions on the selected attempt (the Attempts list and the attempt detail):
stop, retry, extend, note, exclude, include, each confirmed in a dialog that takes the
reason and says what the action does to that attempt (a retry of one its grader failed
re-grades its final). The App writes the command (``storage/controls.py``); the engine
holding the run applies it, so they work from ``mkb tui --attach`` and the browser view too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Label, OptionList
from textual.widgets.option_list import Option

from engine.attempt_records import regrades_final
from storage.queries import AttemptRow

# action → (key, footer title, what the dialog asks, destroys work)
ACTIONS: dict[str, tuple[str, str, str, bool]] = {
    "stop": ("X", "Stop", "End its agent, sandbox and gradings (state stopped).", True),
    "retry": ("R", "Retry", "Run a new try of the same slot; the earlier try is kept.", True),
    "extend": ("E", "Extend", "More submissions now (minutes apply from its next try).", False),
    "note": ("N", "Note", "Pin a note to the attempt.", False),
    "exclude": ("minus", "Exclude", "Leave it out of the analysis (a reason is required).",
                False),
    "include": ("plus", "Include", "Take it back into the analysis (a reason is required).",
                False),
}
NEEDS_REASON = ("exclude", "include")
REGRADE_TEXT = ("Re-grade its stored final (its grader failed: {reason}); the agent does not "
                "run again and the earlier result is kept.")


def action_text(action: str, row: AttemptRow | None) -> tuple[str, bool]:
    """What ``action`` does to the attempt ``row``, and whether it ends work: a retry of an
    attempt its grader failed re-grades its stored final (``engine/regrade.py``)."""
    _, _, what, destroys = ACTIONS[action]
    if action == "retry" and row and regrades_final(row.state, row.outcome, row.reason):
        return REGRADE_TEXT.format(reason=row.reason), False
    return what, destroys


def action_bindings(prefix: str) -> list[BindingType]:
    """The action keys (ids ``<prefix>.<action>``): ``a`` in the footer opens the list of
    actions; each action's own key is in the help and that list (a 100-column footer has
    no room for six more keys)."""
    return [
        Binding("a", "act_menu", "Act", id=f"{prefix}.actions"),
        *(Binding(key, f"act('{action}')", title, show=False, id=f"{prefix}.{action}")
          for action, (key, title, _, _) in ACTIONS.items()),
    ]


def key_label(key: str) -> str:
    return {"minus": "-", "plus": "+"}.get(key, key)


class ActionMenu(ModalScreen[str | None]):
    """The actions on one attempt, each with its key; enter picks one."""

    DEFAULT_CSS = """
    ActionMenu { align: center middle; }
    ActionMenu > Vertical { width: 72; height: auto; border: thick $primary;
                            background: $surface; padding: 0 1; }
    ActionMenu OptionList { height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Cancel", id="action_menu.cancel"),
    ]

    def __init__(self, attempt_id: int, row: AttemptRow | None = None) -> None:
        super().__init__()
        self.attempt_id = attempt_id
        self.row = row

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Attempt {self.attempt_id}: act")
            yield OptionList(*(
                Option(f"{key_label(key):>2}  {title:8} {action_text(action, self.row)[0]}",
                       id=action)
                for action, (key, title, _, _) in ACTIONS.items()))

    @on(OptionList.OptionSelected)
    def picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


def ask_menu(screen: Screen[Any], attempt_id: int | None, row: AttemptRow | None = None
             ) -> None:
    """The list of actions for ``attempt_id`` (``row``: its row, for what each does to it);
    the one picked is confirmed as its key is."""
    if attempt_id is None:
        screen.notify("no attempt selected", severity="warning")
        return

    def picked(action: str | None) -> None:
        if action:
            ask_action(screen, action, attempt_id, row)

    screen.app.push_screen(ActionMenu(attempt_id, row), picked)


def ask_action(screen: Screen[Any], action: str, attempt_id: int | None,
               row: AttemptRow | None = None) -> None:
    """Confirm ``action`` on ``attempt_id`` (its ``row``, when known) in a dialog, then have
    the App send it."""
    if attempt_id is None:
        screen.notify("no attempt selected", severity="warning")
        return
    app: Any = screen.app

    def send(given: ActionInput | None) -> None:
        if given is not None:
            app.act(given.action, attempt_id, reason=given.reason, args=given.args,
                    token=given.token)

    app.push_screen(
        ActionDialog(action, attempt_id, ask_token=app.controls.asks_token, row=row), send)


@dataclass(frozen=True)
class ActionInput:
    action: str
    reason: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    token: str = ""


class ActionDialog(ModalScreen[ActionInput | None]):
    """Confirm one action on one attempt and say why (and how much, for extend)."""

    DEFAULT_CSS = """
    ActionDialog { align: center middle; }
    ActionDialog > Vertical { width: 76; height: auto; border: thick $warning; padding: 0 2;
                              background: $surface; }
    ActionDialog Input { margin-bottom: 1; }
    ActionDialog Horizontal { height: auto; align-horizontal: right; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="action.cancel"),
    ]

    def __init__(self, action: str, attempt_id: int, *, ask_token: bool = False,
                 row: AttemptRow | None = None) -> None:
        super().__init__()
        self.action = action
        self.attempt_id = attempt_id
        self.ask_token = ask_token
        self.row = row

    def compose(self) -> ComposeResult:
        title = ACTIONS[self.action][1]
        what, destroys = action_text(self.action, self.row)
        with Vertical():
            yield Label(f"{title} attempt {self.attempt_id}?", id="action-title")
            yield Label(what + (" This cannot be undone." if destroys else ""),
                        id="action-what")
            if self.action == "extend":
                yield Input(placeholder="extra submissions", id="action-submissions",
                            type="integer")
                yield Input(placeholder="extra minutes (next try)", id="action-minutes",
                            type="number")
            placeholder = "the note" if self.action == "note" else "reason" + (
                " (required)" if self.action in NEEDS_REASON else " (optional)")
            yield Input(placeholder=placeholder, id="action-reason")
            if self.ask_token:
                yield Input(placeholder="control token (mkb tui --serve … --control)",
                            password=True, id="action-token")
            with Horizontal():
                yield Button(title, variant="error" if destroys else "primary",
                             id="action-confirm")
                yield Button("Cancel", id="action-cancel")

    def on_mount(self) -> None:
        self.query(Input).first().focus()

    def _number(self, selector: str) -> float:
        text = self.query_one(selector, Input).value.strip()
        try:
            return float(text) if text else 0.0
        except ValueError:
            return -1.0

    @on(Button.Pressed, "#action-confirm")
    @on(Input.Submitted)
    def confirm(self) -> None:
        text = self.query_one("#action-reason", Input).value.strip()
        args: dict[str, Any] = {}
        if self.action == "note":
            if not text:
                self.notify("a note needs text", severity="error")
                return
            args, text = {"text": text}, ""
        elif self.action in NEEDS_REASON and not text:
            self.notify(f"{self.action} needs a reason", severity="error")
            return
        if self.action == "extend":
            subs, minutes = self._number("#action-submissions"), self._number("#action-minutes")
            if subs < 0 or minutes < 0 or not (subs or minutes):
                self.notify("give extra submissions and/or minutes", severity="error")
                return
            args = {"submissions": int(subs), "minutes": minutes}
        token = self.query_one("#action-token", Input).value if self.ask_token else ""
        self.dismiss(ActionInput(self.action, text, args, token))

    @on(Button.Pressed, "#action-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
