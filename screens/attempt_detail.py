"""Attempt detail: trajectory turn by turn, the feedback timeline, SKILL.md and the outcome.

Live: new trajectory steps are fetched incrementally (``steps(after_id=…)``) and appended to
the log in one batch per redraw; submissions, skill and outcome are re-read when the
attempt's events arrive. Everything the agent wrote is shown as plain text.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from sqlite_utils import Database
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Footer, RichLog, Static, TabbedContent, TabPane

from screens.app_bar import AppBar
from screens.base import Changes, LiveScreen, host
from screens.render import (
    attempt_title,
    outcome_text,
    step_renderable,
    submission_renderable,
)
from storage import queries

MAX_LOG_LINES = 20_000


class TrajectoryLog(RichLog):
    """The agent's turns, appended as they arrive (never parsed as markup)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(markup=False, highlight=False, wrap=True, max_lines=MAX_LOG_LINES,
                         auto_scroll=True, **kwargs)  # type: ignore[arg-type]


def load_detail(
    db: Database, attempt_id: int, after_step_id: int, with_comparisons: bool = True
) -> tuple[queries.AttemptRow | None, list[queries.StepRow], list[queries.SubmissionRow],
           queries.SkillRow | None, list[queries.ComparisonRow] | None]:
    """The attempt, its steps after ``after_step_id``, submissions, skill and comparisons
    (``None`` when not asked for: they change rarely and an experiment has thousands)."""
    row = queries.attempt(db, attempt_id)
    steps: list[queries.StepRow] = []
    while True:
        chunk = queries.steps(db, attempt_id, after_step_id, limit=1000)
        steps.extend(chunk)
        if len(chunk) < 1000:
            break
        after_step_id = max(s.id for s in chunk)
    subs = queries.submissions(db, attempt_id)
    skill = queries.latest_skill(db, attempt_id)
    comps: list[queries.ComparisonRow] | None = None
    if row is not None and with_comparisons:
        comps = [c for c in queries.comparisons(db, row.experiment_id)
                 if attempt_id in (c.source_attempt_id, c.baseline_attempt_id,
                                   c.treatment_attempt_id)]
    return row, steps, subs, skill, comps


class AttemptDetailScreen(LiveScreen):
    """One attempt, live."""

    CSS_PATH = "attempt_detail.tcss"
    HELP = ("The header gives the final evaluation's speedup (what the paper scores) and, "
            "dim, the best submission's. PageUp / PageDown page the open tab.")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back", id="detail.back"),
        Binding("t", "tab('trajectory')", "Trajectory", id="detail.trajectory"),
        Binding("f", "tab('feedback')", "Feedback", id="detail.feedback"),
        Binding("k", "tab('skill')", "Skill", id="detail.skill"),
        Binding("o", "tab('outcome')", "Outcome", id="detail.outcome"),
        Binding("c", "open_comparison", "Comparison", id="detail.comparison"),
    ]

    def __init__(self, attempt_id: int) -> None:
        super().__init__()
        self.attempt_id = attempt_id
        self.last_step_id = 0
        self.step_count = 0
        self.row: queries.AttemptRow | None = None
        self.comparisons: list[queries.ComparisonRow] = []
        self._placeholder = False
        self._comparisons_stale = True

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Static(id="detail-title", markup=False)
        with TabbedContent(initial="trajectory", id="detail-tabs"):
            with TabPane("Trajectory", id="trajectory"):
                yield TrajectoryLog(id="trajectory-log")
            with TabPane("Feedback", id="feedback"), VerticalScroll():
                yield Static(id="submissions", markup=False)
            with TabPane("Skill", id="skill"), VerticalScroll():
                yield Static(id="skill-text", markup=False)
            with TabPane("Outcome", id="outcome"):
                yield Static(id="outcome-text", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        host(self).changes.subscribe(self, self.on_changes)
        self.load()

    @work(exclusive=True, group="detail-load", exit_on_error=False)
    async def load(self) -> None:
        with_comparisons, self._comparisons_stale = self._comparisons_stale, False
        row, steps, subs, skill, comps = await host(self).read(
            load_detail, self.attempt_id, self.last_step_id, with_comparisons)
        if row is None:
            self.query_one("#detail-title", Static).update(
                Text(f"attempt {self.attempt_id} not found", style="red"))
            return
        self.row = row
        if comps is not None:
            self.comparisons = comps
        self.query_one("#detail-title", Static).update(attempt_title(row))
        log = self.query_one(TrajectoryLog)
        if steps:
            if self._placeholder:
                log.clear()
                self._placeholder = False
            with self.app.batch_update():
                for step in steps:
                    log.write(step_renderable(step))
            self.last_step_id = max(s.id for s in steps)
            self.step_count += len(steps)
        elif self.step_count == 0 and not self._placeholder:
            log.write(Text("no trajectory steps recorded yet", style="dim"))
            self._placeholder = True
        subs_view = (Group(*(submission_renderable(s) for s in subs)) if subs
                     else Text("no submissions yet", style="dim"))
        self.query_one("#submissions", Static).update(subs_view)
        skill_view = (Text(skill.text) if skill and skill.text.strip()
                      else Text("no skill collected (blank or missing)", style="dim"))
        self.query_one("#skill-text", Static).update(skill_view)
        self.query_one("#outcome-text", Static).update(outcome_text(row))

    def on_changes(self, changes: Changes) -> None:
        if changes.comparisons:
            self._comparisons_stale = True
        if changes.touches(self.attempt_id) or changes.comparisons:
            self.reload_or_defer()

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def main_scrollable(self) -> Widget | None:
        """The open tab's log or scroll view."""
        pane = self.query_one(TabbedContent).active_pane
        if pane is None:
            return None
        found = pane.query("TrajectoryLog, VerticalScroll")
        return found.first() if found else None

    def action_open_comparison(self) -> None:
        if not self.comparisons:
            self.notify("this attempt is in no comparison yet")
            return
        mine = [c for c in self.comparisons if c.treatment_attempt_id == self.attempt_id]
        self.app.open_comparison((mine or self.comparisons)[0].id)  # type: ignore[attr-defined]
