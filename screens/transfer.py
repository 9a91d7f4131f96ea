"""Transfer inspector: one comparison — the three skills side by side, the three outcomes,
ρ and help/harm/neutral, the labels with evidence; add human labels, edit the source skill
and launch a treatment with the edited skill; a side-by-side diff of the source attempt's
skill or implementation against the treatment's (the two DSLs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from engine.rubric.model import default_rubric
from screens.app_bar import AppBar
from screens.base import Changes, host
from screens.dialogs import LabelDialog, LabelInput, SkillEdit, SkillEditor
from screens.diffs import DiffPanel
from screens.render import arm_summary, diff_texts, edit_diff_text, rho_text
from screens.rubric_terms import TASKS
from storage import queries

LABEL_COLUMNS = (("task", "task"), ("subject", "subject"), ("category", "category"),
                 ("value", "value"), ("annotator", "annotator"), ("evidence", "evidence"))
MAX_LABEL_COLUMN = 80  # cells; longer evidence is cut in the table (the dialog shows it all)


@dataclass(frozen=True)
class TransferView:
    """Everything the inspector shows, read in one snapshot."""

    comparison: queries.ComparisonRow
    source: queries.AttemptRow | None
    baseline: queries.AttemptRow | None
    treatment: queries.AttemptRow | None
    source_skill: queries.SkillRow | None
    baseline_skill: queries.SkillRow | None
    treatment_skill: queries.SkillRow | None
    attached_skill: queries.SkillRow | None
    labels: list[queries.LabelRow]
    parent_skill: queries.SkillRow | None = None  # what an edited attached skill came from
    source_implementation: str | None = None  # the source attempt's final implementation
    treatment_implementation: str | None = None

    @property
    def edited(self) -> bool:
        """The treatment was given a person's edited skill, not the source's verbatim."""
        return self.attached_skill is not None and self.attached_skill.kind == "edited"

    @property
    def given_skill(self) -> queries.SkillRow | None:
        """The skill the treatment was given."""
        return self.attached_skill if self.edited else self.source_skill

    @property
    def original_skill(self) -> queries.SkillRow | None:
        """What an edited skill was edited from (its parent, else the source's skill)."""
        return self.parent_skill or self.source_skill


def load_transfer(db: Database, comparison_id: int) -> TransferView | None:
    comp = queries.comparison(db, comparison_id)
    if comp is None:
        return None

    def attempt(attempt_id: int | None) -> queries.AttemptRow | None:
        return queries.attempt(db, attempt_id) if attempt_id is not None else None

    def skill_of(row: queries.AttemptRow | None) -> queries.SkillRow | None:
        return queries.latest_skill(db, row.id) if row is not None else None

    source, baseline, treatment = (attempt(comp.source_attempt_id),
                                   attempt(comp.baseline_attempt_id),
                                   attempt(comp.treatment_attempt_id))
    attached = (queries.skill(db, treatment.attached_skill_id)
                if treatment is not None and treatment.attached_skill_id is not None else None)
    source_skill = skill_of(source)
    subjects = {("comparison", comp.id)}
    if treatment is not None:
        subjects.add(("attempt", treatment.id))
    if source_skill is not None:
        subjects.add(("skill", source_skill.id))
    if attached is not None:
        subjects.add(("skill", attached.id))
    found = [label for subject_id in {s[1] for s in subjects}
             for label in queries.labels(db, subject_id=subject_id)
             if (label.subject_type, label.subject_id) in subjects]
    found.sort(key=lambda label: label.id)
    parent = (queries.skill(db, attached.parent_skill_id)
              if attached is not None and attached.parent_skill_id is not None else None)
    return TransferView(comp, source, baseline, treatment, source_skill, skill_of(baseline),
                        skill_of(treatment), attached, found, parent,
                        queries.implementation(db, source.id) if source else None,
                        queries.implementation(db, treatment.id) if treatment else None)


def skill_body(skill: queries.SkillRow | None) -> str:
    return skill.text if skill is not None else ""


def given_skill_title(view: TransferView) -> Text:
    """The first pane's title: the source skill, or the edited skill and its lineage."""
    skill = view.attached_skill
    if not view.edited or skill is None:
        return Text("source skill")
    original = view.original_skill
    origin = f"skill {original.id}" if original is not None else "the source skill"
    return Text(f"edited skill {skill.id} given to the treatment, from {origin} "
                f"(+ added, - removed; d toggles)")


def dsl_diff_caption(view: TransferView, subject: str) -> tuple[Text, str]:
    """The caption above the source-vs-treatment diff, and the diff's own title."""
    def side(name: str, row: queries.AttemptRow | None) -> str:
        return f"{name} #{row.id} {row.dsl}" if row is not None else f"{name} (none)"

    source, treatment = side("source", view.source), side("treatment", view.treatment)
    other = "implementation" if subject == "skill" else "skill"
    caption = Text(f"{subject}: {source} vs {treatment}", style="bold")
    caption.append(f"  (i: {other}; v: the three skills)", style="dim")
    return caption, f"{source} → {treatment} · {subject}"


class TransferScreen(Screen[None]):
    """One comparison (model, problem, direction s→t), inspected."""

    CSS_PATH = "transfer.tcss"
    HELP = ("The baseline and treatment skills highlight the lines that differ from the skill "
            "the treatment was given (d toggles). v shows the source attempt against the "
            "treatment (its other DSL) side by side instead: the skill, or with i the "
            "implementation; v again returns to the three skills.")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back", id="transfer.back"),
        Binding("d", "toggle_diff", "Diff", id="transfer.diff"),
        Binding("l", "add_label", "Label", id="transfer.label"),
        Binding("e", "edit_skill", "Edit skill", id="transfer.edit"),
        Binding("s", "open('source')", "Source", id="transfer.source"),
        Binding("b", "open('baseline')", "Baseline", id="transfer.baseline"),
        Binding("t", "open('treatment')", "Treatment", id="transfer.treatment"),
        # no room in the footer at 100 columns: listed in the help screen and the arms
        Binding("v", "toggle_dsl_diff", "Source vs treatment diff", show=False,
                id="transfer.dsl_diff"),
        Binding("i", "toggle_diff_subject", "Diff skill / implementation", show=False,
                id="transfer.diff_subject"),
    ]

    def __init__(self, comparison_id: int) -> None:
        super().__init__()
        self.comparison_id = comparison_id
        self.view: TransferView | None = None
        self.show_diff = True
        self.show_dsl_diff = False
        self.diff_subject = "skill"
        self.renders = 0

    def compose(self) -> ComposeResult:
        yield AppBar()
        with Vertical(id="transfer-summary"):
            yield Static(id="transfer-title", markup=False)
            yield Static(id="transfer-arms", markup=False)
        with Horizontal(id="skills"):
            for key, title in (("source", "source skill"), ("baseline", "target solo skill"),
                               ("treatment", "treatment skill")):
                with Vertical(classes="skill-pane"):
                    yield Static(title, classes="section-title", id=f"{key}-skill-title")
                    with VerticalScroll():
                        yield Static(id=f"{key}-skill", markup=False)
        yield DiffPanel(id="dsl-diff")
        yield Static("labels", classes="section-title")
        yield DataTable(id="labels-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self._fill_labels([])
        host(self).changes.subscribe(self, self.on_changes)
        self.load()

    def _fill_labels(self, labels: list[queries.LabelRow]) -> None:
        """Rebuild the labels table with columns sized to their content at once (a table
        measured later, on idle, can paint a frame with columns cut to their headers)."""
        rows = [
            (Text(x.task), Text(f"{x.subject_type} {x.subject_id}"), Text(x.category),
             Text(x.value), Text(f"{x.annotator} ({x.annotator_kind})"), Text(x.evidence))
            for x in labels
        ]
        table = self.query_one("#labels-table", DataTable)
        table.clear(columns=True)
        for i, (key, label) in enumerate(LABEL_COLUMNS):
            width = max([len(label), *(row[i].cell_len for row in rows)])
            table.add_column(label, key=key, width=min(width, MAX_LABEL_COLUMN))
        for row, x in zip(rows, labels):
            table.add_row(*row, key=str(x.id))

    @work(exclusive=True, group="transfer-load", exit_on_error=False)
    async def load(self) -> None:
        view = await host(self).read(load_transfer, self.comparison_id)
        if view is None:
            self.query_one("#transfer-title", Static).update(
                Text(f"comparison {self.comparison_id} not found", style="red"))
            return
        if view == self.view:
            return  # an unrelated change: keep the screen (and the table's widths) as it is
        self.view = view
        self.render_view()

    def render_view(self) -> None:
        view = self.view
        if view is None:
            return
        self.renders += 1
        c = view.comparison
        title = Text(f"comparison {c.id} · {c.model} · {c.problem_id} ({c.family}) · "
                     f"{c.direction} · r{c.replicate}"
                     + (f" · variant {c.variant}" if c.variant else "") + "   ")
        title.append_text(rho_text(c))
        self.query_one("#transfer-title", Static).update(title)
        source_arm = arm_summary("source", view.source)
        source_arm.append("   v: diff with the treatment", style="dim")
        arms = Text("\n").join([source_arm,
                                arm_summary("baseline (target solo)", view.baseline),
                                arm_summary("treatment", view.treatment)])
        self.query_one("#transfer-arms", Static).update(arms)
        given = skill_body(view.given_skill)  # the source's skill, or the edited one
        baseline = skill_body(view.baseline_skill)
        treatment = skill_body(view.treatment_skill)
        empty = Text("(blank or missing)", style="dim")
        if self.show_diff:
            _, baseline_view = diff_texts(given, baseline)
            _, treatment_view = diff_texts(given, treatment)
        else:
            baseline_view, treatment_view = Text(baseline), Text(treatment)
        given_view = Text(given)
        if view.edited and self.show_diff:
            given_view = edit_diff_text(skill_body(view.original_skill), given)
        for key, body, shown in (("source", given, given_view),
                                 ("baseline", baseline, baseline_view),
                                 ("treatment", treatment, treatment_view)):
            self.query_one(f"#{key}-skill", Static).update(shown if body.strip() else empty)
        self.query_one("#source-skill-title", Static).update(given_skill_title(view))
        self._fill_labels(view.labels)
        self.query_one("#skills").display = not self.show_dsl_diff
        self.query_one("#dsl-diff").display = self.show_dsl_diff
        if self.show_dsl_diff:
            self.render_dsl_diff()

    @work(exclusive=True, group="transfer-diff", exit_on_error=False)
    async def render_dsl_diff(self) -> None:
        """The source attempt's skill or implementation against the treatment's."""
        view = self.view
        if view is None:
            return
        subject = self.diff_subject
        caption, title = dsl_diff_caption(view, subject)
        if subject == "skill":
            original = skill_body(view.source_skill)
            modified = skill_body(view.treatment_skill)
        else:
            original = view.source_implementation or ""
            modified = view.treatment_implementation or ""
        placeholder = None
        if view.source is None or view.treatment is None:
            placeholder = "this comparison has no source or no treatment attempt yet"
        await self.query_one("#dsl-diff", DiffPanel).show(caption, title, original, modified,
                                                          subject, placeholder)

    def action_toggle_dsl_diff(self) -> None:
        self.show_dsl_diff = not self.show_dsl_diff
        self.render_view()

    def action_toggle_diff_subject(self) -> None:
        self.diff_subject = "implementation" if self.diff_subject == "skill" else "skill"
        self.show_dsl_diff = True
        self.render_view()

    def on_changes(self, changes: Changes) -> None:
        view = self.view
        ids = {view.comparison.source_attempt_id, view.comparison.baseline_attempt_id,
               view.comparison.treatment_attempt_id} if view else set()
        if changes.labels or changes.comparisons or any(
            i is not None and changes.touches(i) for i in ids
        ) or "skill_updated" in changes.kinds:
            self.load()

    def action_toggle_diff(self) -> None:
        self.show_diff = not self.show_diff
        self.render_view()

    def action_open(self, which: str) -> None:
        view = self.view
        row = getattr(view, which, None) if view else None
        if row is None:
            self.notify(f"no {which} attempt")
            return
        self.app.open_attempt(row.id)  # type: ignore[attr-defined]

    def action_add_label(self) -> None:
        if host(self).read_only:
            self.notify("read-only view: labels cannot be added", severity="warning")
            return
        self.app.push_screen(LabelDialog("cause"), self._label_chosen)

    def _label_chosen(self, choice: LabelInput | None) -> None:
        if choice is not None:
            self.save_label(choice)

    def subject_for(self, task: str) -> tuple[str, int] | None:
        view = self.view
        if view is None:
            return None
        subject_type = TASKS[task][0]
        if subject_type == "comparison":
            return "comparison", view.comparison.id
        if subject_type == "attempt":
            return ("attempt", view.treatment.id) if view.treatment else None
        skill = view.attached_skill or view.source_skill
        return ("skill", skill.id) if skill else None

    @work(group="transfer-write", exit_on_error=False)
    async def save_label(self, choice: LabelInput) -> None:
        subject = self.subject_for(choice.task)
        if subject is None:
            self.notify(f"nothing to label for {choice.task}", severity="warning")
            return
        await self.app.add_human_label(  # type: ignore[attr-defined]
            task=choice.task, subject_type=subject[0], subject_id=subject[1],
            category=choice.category, value=choice.value, evidence=choice.evidence,
            rubric_hash=default_rubric().hash)
        self.notify(f"label saved: {choice.category} = {choice.value}")
        self.load()

    def action_edit_skill(self) -> None:
        if host(self).read_only:
            self.notify("read-only view: skills cannot be edited", severity="warning")
            return
        view = self.view
        if view is None:
            return
        text = skill_body(view.given_skill)
        c = view.comparison
        which = "edited" if view.edited else "source"
        self.app.push_screen(
            SkillEditor(text, f"Edit the {which} skill of {c.problem_id} {c.direction} "
                              f"({c.model}); ctrl+s saves"),
            self._skill_edited,
        )

    def _skill_edited(self, edit: SkillEdit | None) -> None:
        if edit is not None:
            self.save_skill(edit)

    @work(group="transfer-write", exit_on_error=False)
    async def save_skill(self, edit: SkillEdit) -> None:
        view = self.view
        if view is None:
            return
        parent = view.given_skill.id if view.given_skill else None
        skill_id = await self.app.save_edited_skill(edit.text, parent)  # type: ignore[attr-defined]
        self.notify(f"edited skill {skill_id} saved")
        if edit.launch:
            try:
                await self.app.launch_edited_transfer(  # type: ignore[attr-defined]
                    view.comparison.id, edit.text)
            except Exception as exc:  # noqa: BLE001 - shown to the user
                self.notify(f"cannot launch: {exc}", severity="error", timeout=10)
                return
            self.notify("treatment with the edited skill launched")
