"""Attempt detail: trajectory turn by turn, the feedback timeline, SKILL.md, the outcome, plots
of the speedup and % of speed of light per submission, and a side-by-side diff of the
implementation or skill between two submissions.

Live: new trajectory steps are fetched incrementally (``steps(after_id=…)``) and appended to
the log in one batch per redraw; the reply the model is streaming shows as a tail under them
(``screens/live_reply.py``) until its step is stored; submissions, skill and outcome are
re-read when the attempt's events arrive. Everything the agent wrote is shown as plain text.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from sqlite_utils import Database
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Footer, RichLog, Select, Static, TabbedContent, TabPane

from screens.app_bar import AppBar
from screens.attempt_actions import action_bindings, ask_action, ask_menu
from screens.base import Changes, LiveScreen, host
from screens.diffs import DiffPanel, submission_text
from screens.live_reply import ReplyTail
from screens.plots import (
    PlotPanel,
    sol_caption,
    sol_series,
    speedup_caption,
    speedup_series,
    submission_label,
)
from screens.render import (
    attempt_title,
    interventions_text,
    outcome_text,
    step_renderable,
    submission_renderable,
)
from storage import controls, queries

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
            "dim, the best submission's. PageUp / PageDown page the open tab. Plots (p): "
            "the speedup and % of speed of light per submission. Diff (d): the "
            "implementation or SKILL.md (i switches) of two submissions side by side, by "
            "default the previous one against the latest; [ / ] step both back / forward, "
            "or pick each in its list.")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back", id="detail.back"),
        Binding("t", "tab('trajectory')", "Trajectory", id="detail.trajectory"),
        Binding("f", "tab('feedback')", "Feedback", id="detail.feedback"),
        Binding("k", "tab('skill')", "Skill", id="detail.skill"),
        Binding("o", "tab('outcome')", "Outcome", id="detail.outcome"),
        Binding("c", "open_comparison", "Comparison", id="detail.comparison"),
        # in the tab titles (the footer has no room for them at 100 columns)
        Binding("p", "tab('plots')", "Plots", show=False, id="detail.plots"),
        Binding("d", "tab('diff')", "Diff", show=False, id="detail.diff"),
        Binding("i", "toggle_diff_subject", "Diff implementation / skill", show=False,
                id="detail.diff_subject"),
        Binding("left_square_bracket", "step_pair(-1)", "Diff the earlier pair", show=False,
                id="detail.diff_earlier"),
        Binding("right_square_bracket", "step_pair(1)", "Diff the later pair", show=False,
                id="detail.diff_later"),
        *action_bindings("detail"),  # stop, retry, extend, note, exclude, include
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
        self.subs: list[queries.SubmissionRow] | None = None
        self.diff_subject = "implementation"
        self.diff_pair: tuple[int | None, int | None] = (None, None)  # submission ids
        self._pair_chosen = False  # a person picked the pair: stop following the latest

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Static(id="detail-title", markup=False)
        with TabbedContent(initial="trajectory", id="detail-tabs"):
            with TabPane("Trajectory", id="trajectory"):
                yield TrajectoryLog(id="trajectory-log")
                yield ReplyTail(id="reply-tail")
            with TabPane("Feedback", id="feedback"), VerticalScroll():
                yield Static(id="submissions", markup=False)
            with TabPane("Skill", id="skill"), VerticalScroll():
                yield Static(id="skill-text", markup=False)
            with TabPane("Outcome", id="outcome"):
                yield Static(id="outcome-text", markup=False)
            with TabPane("Plots (p)", id="plots"):
                yield PlotPanel(id="speedup-plot")
                yield PlotPanel(id="sol-plot")
            with TabPane("Diff (d)", id="diff"):
                with Horizontal(id="diff-choice"):
                    yield Select[int]([], prompt="older submission", id="diff-from")
                    yield Select[int]([], prompt="newer submission", id="diff-to")
                yield DiffPanel(id="submission-diff")
        yield Footer()

    def on_mount(self) -> None:
        host(self).changes.subscribe(self, self.on_changes)
        host(self).replies.subscribe(self, self.on_replies)
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
        self.query_one(ReplyTail).show(host(self).live_reply(self.attempt_id))  # after steps
        subs_view = (Group(*(submission_renderable(s) for s in subs)) if subs
                     else Text("no submissions yet", style="dim"))
        self.query_one("#submissions", Static).update(subs_view)
        skill_view = (Text(skill.text) if skill and skill.text.strip()
                      else Text("no skill collected (blank or missing)", style="dim"))
        self.query_one("#skill-text", Static).update(skill_view)
        commands = await host(self).read(controls.for_attempt, self.attempt_id)
        self.query_one("#outcome-text", Static).update(
            Text.assemble(outcome_text(row), interventions_text(commands)))
        if subs != self.subs:
            self.subs = subs
            self.show_plots(subs)
            self.update_diff_choice(subs)
        elif self.diff_subject == "skill":
            self.render_diff()  # the skill may have changed since

    def on_changes(self, changes: Changes) -> None:
        if changes.comparisons:
            self._comparisons_stale = True
        if changes.touches(self.attempt_id) or changes.comparisons:
            self.reload_or_defer()

    def on_replies(self, attempt_ids: frozenset[int]) -> None:
        """The streaming reply grew; one that ended is hidden by :meth:`load`, together with
        the arrival of its step."""
        reply = host(self).live_reply(self.attempt_id) if self.attempt_id in attempt_ids else None
        if reply is not None:
            self.query_one(ReplyTail).show(reply)

    def action_act(self, action: str) -> None:
        ask_action(self, action, self.attempt_id, self.row)

    def action_act_menu(self) -> None:
        ask_menu(self, self.attempt_id, self.row)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    # -- plots ----------------------------------------------------------------------------------
    def show_plots(self, subs: list[queries.SubmissionRow]) -> None:
        """The speedup and % of speed of light per submission, or why there is none."""
        speed, sol = speedup_series(subs), sol_series(subs)
        for panel_id, series, (caption, placeholder), color, reference in (
            ("#speedup-plot", speed, speedup_caption(speed), "cyan", 1.0),
            ("#sol-plot", sol, sol_caption(sol), "magenta", None),
        ):
            plot = self.query_one(panel_id, PlotPanel).show(caption, placeholder)
            if plot is not None:
                plot.draw_series(series, color, reference)

    # -- diff between two submissions -----------------------------------------------------------
    def update_diff_choice(self, subs: list[queries.SubmissionRow]) -> None:
        """Offer the submissions in both lists; unless a person chose a pair, compare the
        previous submission with the latest."""
        ids = [s.id for s in subs]
        old, new = self.diff_pair
        if not self._pair_chosen or old not in ids or new not in ids:
            self._pair_chosen = False
            old, new = (ids[-2] if len(ids) > 1 else None), (ids[-1] if ids else None)
        options = [(self._submission_option(s), s.id) for s in subs]
        self._set_pair(old, new, options)

    @staticmethod
    def _submission_option(sub: queries.SubmissionRow) -> str:
        verdict = sub.verdict or sub.state
        speed = f" {sub.speedup:.2f}x" if sub.speedup is not None else ""
        return f"{submission_label(sub)} {sub.purpose} · {verdict}{speed}"

    def _set_pair(self, old: int | None, new: int | None,
                  options: list[tuple[str, int]] | None = None) -> None:
        """Show ``old`` → ``new`` in the two lists (without their change messages) and diff."""
        self.diff_pair = (old, new)
        with self.prevent(Select.Changed):
            for select_id, value in (("#diff-from", old), ("#diff-to", new)):
                select = self.query_one(select_id, Select)
                if options is not None:
                    select.set_options(options)
                select.value = Select.NULL if value is None else value
        self.render_diff()

    @on(Select.Changed, "#diff-from, #diff-to")
    def pair_picked(self, event: Select.Changed) -> None:
        def chosen(select_id: str) -> int | None:
            value = self.query_one(select_id, Select).value
            return value if isinstance(value, int) else None

        self._pair_chosen = True
        self.diff_pair = (chosen("#diff-from"), chosen("#diff-to"))
        self.render_diff()

    def action_step_pair(self, step: int) -> None:
        """Move the pair one submission back or forward (previous vs the one after it)."""
        self.action_tab("diff")
        ids = [s.id for s in self.subs or []]
        if len(ids) < 2:
            self.notify("a diff needs two submissions")
            return
        new = self.diff_pair[1]
        at = ids.index(new) if new in ids else len(ids) - 1
        at = min(max(at + step, 1), len(ids) - 1)
        self._pair_chosen = at != len(ids) - 1  # back at the latest: follow new ones again
        self._set_pair(ids[at - 1], ids[at])

    def action_toggle_diff_subject(self) -> None:
        self.action_tab("diff")
        self.diff_subject = "skill" if self.diff_subject == "implementation" else "implementation"
        self.render_diff()

    @work(exclusive=True, group="detail-diff", exit_on_error=False)
    async def render_diff(self) -> None:
        subs = {s.id: s for s in self.subs or []}
        old, new = (subs.get(i) if i is not None else None for i in self.diff_pair)
        subject = self.diff_subject
        other = "skill" if subject == "implementation" else "implementation"
        caption = Text(f"{subject} ", style="bold")
        caption.append(f"of two submissions (i: {other}; [ / ]: earlier / later pair)",
                       style="dim")
        panel = self.query_one("#submission-diff", DiffPanel)
        placeholder = None
        if not subs:
            placeholder = "no submissions yet: nothing to compare"
        elif len(subs) == 1:
            placeholder = "one submission so far: a diff needs two"
        elif old is None or new is None:
            placeholder = "pick two submissions above"
        if placeholder is not None or old is None or new is None:
            await panel.show(caption, "", None, None, subject, placeholder)
            return
        skills = (await host(self).read(queries.skills_of, self.attempt_id)
                  if subject == "skill" else [])
        title = f"{submission_label(old)} → {submission_label(new)} · {subject}"
        await panel.show(caption, title, submission_text(old, subject, skills),
                         submission_text(new, subject, skills), subject)

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
