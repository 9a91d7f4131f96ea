"""Modal dialogs: add a human label, edit a skill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, TextArea

from engine.rubric.model import PROPAGATION_CATEGORY
from screens.rubric_terms import TASKS, values_for


def categories_for(task: str) -> tuple[str, ...]:
    """Categories a person can label for ``task`` (uptake also has the propagation flag)."""
    categories = TASKS[task][1]
    if task == "uptake" and PROPAGATION_CATEGORY not in categories:
        return (*categories, PROPAGATION_CATEGORY)
    return categories


@dataclass(frozen=True)
class LabelInput:
    task: str
    category: str
    value: str
    evidence: str


class LabelDialog(ModalScreen[LabelInput | None]):
    """Pick a rubric task, category and value, and give the evidence."""

    DEFAULT_CSS = """
    LabelDialog { align: center middle; }
    LabelDialog > Vertical { width: 80; height: auto; border: thick $primary; padding: 0 2;
                             background: $surface; }
    LabelDialog Select, LabelDialog Input { margin-bottom: 1; }
    LabelDialog .field-label { color: $text-muted; }
    LabelDialog Horizontal { height: auto; align-horizontal: right; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="label.cancel"),
    ]

    def __init__(self, task: str = "cause") -> None:
        super().__init__()
        self.task_name = task

    def compose(self) -> ComposeResult:
        categories = categories_for(self.task_name)
        values = values_for(self.task_name, categories[0])
        with Vertical():
            yield Label("Add a human label")
            yield Label("Task", classes="field-label", id="label-task-name")
            yield Select([(t, t) for t in TASKS], value=self.task_name, allow_blank=False,
                         id="label-task")
            yield Label("Category", classes="field-label", id="label-category-name")
            yield Select([(c, c) for c in categories], value=categories[0], allow_blank=False,
                         id="label-category")
            yield Label("Value", classes="field-label", id="label-value-name")
            yield Select([(v, v) for v in values], value=values[0], allow_blank=False,
                         id="label-value")
            yield Label("Evidence", classes="field-label", id="label-evidence-name")
            yield Input(placeholder="a quote or a reason", id="label-evidence")
            with Horizontal():
                yield Button("Save", variant="primary", id="label-save")
                yield Button("Cancel", id="label-cancel")

    @on(Select.Changed, "#label-task")
    def task_changed(self, event: Select.Changed) -> None:
        if event.value is Select.NULL or event.value == self.task_name:
            return
        self.task_name = str(event.value)
        categories = categories_for(self.task_name)
        category = self.query_one("#label-category", Select)
        category.set_options([(c, c) for c in categories])
        category.value = categories[0]
        self._offer_values(categories[0])

    @on(Select.Changed, "#label-category")
    def category_changed(self, event: Select.Changed) -> None:
        if event.value in categories_for(self.task_name):  # not a stale event of another task
            self._offer_values(str(event.value))

    def _offer_values(self, category: str) -> None:
        """Offer the values of ``category`` (kept when the current value is still allowed)."""
        values = values_for(self.task_name, category)
        select = self.query_one("#label-value", Select)
        current = select.value
        select.set_options([(v, v) for v in values])
        select.value = current if current in values else values[0]

    @on(Button.Pressed, "#label-save")
    @on(Input.Submitted, "#label-evidence")
    def save(self) -> None:
        category = str(self.query_one("#label-category", Select).value)
        value = str(self.query_one("#label-value", Select).value)
        if category not in categories_for(self.task_name) or value not in values_for(
            self.task_name, category
        ):
            self.notify(f"{value!r} is not a value of {self.task_name}/{category}",
                        severity="error")
            return
        self.dismiss(LabelInput(
            task=self.task_name,
            category=category,
            value=value,
            evidence=self.query_one("#label-evidence", Input).value.strip(),
        ))

    @on(Button.Pressed, "#label-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True)
class SkillEdit:
    text: str
    launch: bool


class SkillEditor(ModalScreen[SkillEdit | None]):
    """Edit a skill; save it as an edited skill, optionally launching a treatment with it."""

    DEFAULT_CSS = """
    SkillEditor { align: center middle; }
    SkillEditor > Vertical { width: 90%; height: 90%; border: thick $primary; padding: 0 1;
                             background: $surface; }
    SkillEditor TextArea { height: 1fr; }
    SkillEditor Horizontal { height: auto; align-horizontal: right; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="skill_editor.cancel"),
        Binding("ctrl+s", "save(False)", "Save", id="skill_editor.save"),
    ]

    def __init__(self, text: str, title: str) -> None:
        super().__init__()
        self.text = text
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, markup=False)
            yield TextArea(self.text, soft_wrap=True, id="skill-editor")
            with Horizontal():
                yield Button("Save", variant="primary", id="skill-save")
                yield Button("Save & launch treatment", variant="warning", id="skill-launch")
                yield Button("Cancel", id="skill-cancel")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_save(self, launch: bool) -> None:
        text = self.query_one(TextArea).text
        if not text.strip():
            self.notify("a blank skill cannot be saved", severity="error")
            return
        self.dismiss(SkillEdit(text, launch))

    @on(Button.Pressed, "#skill-save")
    def save_pressed(self) -> None:
        self.action_save(False)

    @on(Button.Pressed, "#skill-launch")
    def launch_pressed(self) -> None:
        self.action_save(True)

    @on(Button.Pressed, "#skill-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
