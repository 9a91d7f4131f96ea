"""Rubric views from labels: skill-category prevalence, uptake, failure causes, per annotator.

Minimal by design: counts from ``storage.queries.labels``. The rubric/annotation module
(another package) writes LLM labels; human labels come from the transfer inspector.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from screens.app_bar import AppBar
from screens.base import Changes, host
from storage import queries


def rubric_tables(db: Database) -> dict[str, list[tuple[str, str, str, int]]]:
    """Per task: (category, value, annotator kind, count), most frequent first."""
    counts: dict[str, dict[tuple[str, str, str], int]] = {"skill": {}, "uptake": {},
                                                          "cause": {}}
    for label in queries.labels(db):
        key = (label.category, label.value, label.annotator_kind)
        bucket = counts.setdefault(label.task, {})
        bucket[key] = bucket.get(key, 0) + 1
    return {task: sorted(((c, v, k, n) for (c, v, k), n in bucket.items()),
                         key=lambda r: (-r[3], r[0], r[1], r[2]))
            for task, bucket in counts.items()}


class RubricScreen(Screen[None]):
    """Prevalence, uptake and causes from all labels in the database."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "refresh", "Refresh", id="rubric.refresh"),
    ]
    DEFAULT_CSS = """
    RubricScreen DataTable { height: 1fr; }
    RubricScreen TabbedContent { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Static(id="rubric-summary", markup=False)
        with TabbedContent(initial="rubric-skill"):
            for task, title in (("skill", "Skill content"), ("uptake", "Uptake"),
                                ("cause", "Failure causes")):
                with TabPane(title, id=f"rubric-{task}"):
                    yield DataTable(id=f"rubric-{task}-table", cursor_type="row",
                                    zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        for task in ("skill", "uptake", "cause"):
            table = self.query_one(f"#rubric-{task}-table", DataTable)
            for name in ("category", "value", "annotator", "count"):
                table.add_column(name, key=name)
        host(self).changes.subscribe(self, self.on_changes)
        self.load()

    @work(exclusive=True, exit_on_error=False)
    async def load(self) -> None:
        tables = await host(self).read(rubric_tables)
        total = 0
        for task in ("skill", "uptake", "cause"):
            table = self.query_one(f"#rubric-{task}-table", DataTable)
            table.clear()
            for category, value, kind, n in tables.get(task, []):
                total += n
                table.add_row(Text(category), Text(value), Text(kind),
                              Text(str(n), justify="right"))
        self.query_one("#rubric-summary", Static).update(
            Text(f"{total} labels" if total else
                 "no labels yet: add human labels in the transfer inspector (key l), or run "
                 "the annotator", style="" if total else "dim"))

    def on_changes(self, changes: Changes) -> None:
        if changes.labels:
            self.load()

    def action_refresh(self) -> None:
        self.load()
