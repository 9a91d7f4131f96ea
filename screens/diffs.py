"""Side-by-side diffs (textual-diff-view): an attempt's implementation or SKILL.md between two
of its submissions, and a transfer's source attempt against its treatment (two DSLs).

The texts come from the store through ``MkbApp.read``, which passes them through
``storage.sanitize.clean``: control sequences are gone before a diff sees them. The diff
widget renders text as ``Content`` (syntax-highlighted, never parsed as markup), and its
title here is assembled from plain strings, so ``[bold]`` in a skill or a path is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Static
from textual_diff_view import DiffView

from storage.queries import SkillRow, SubmissionRow

SUBJECTS = ("implementation", "skill")
FILE_NAMES = {"implementation": "implementation.py", "skill": "SKILL.md"}  # for highlighting


def skill_at(skills: Sequence[SkillRow], stamp: str | None) -> SkillRow | None:
    """The version of SKILL.md current at ``stamp`` (an ISO time from the same clock): the
    latest recorded at or before it; None when none was yet (or no time is known)."""
    if not stamp:
        return None
    current = None
    for skill in sorted(skills, key=lambda s: s.id):
        if skill.created_at <= stamp:
            current = skill
    return current


def submission_text(sub: SubmissionRow, subject: str, skills: Sequence[SkillRow]) -> str:
    """What ``subject`` was at a submission: its source, or the skill current then."""
    if subject == "implementation":
        return sub.source
    skill = skill_at(skills, sub.submitted_at)
    return skill.text if skill is not None else ""


class SourceDiff(DiffView):
    """A split diff with line numbers and +/- marks, titled in plain text."""

    def __init__(self, title: str, original: str, modified: str, subject: str,
                 **kwargs: Any) -> None:
        name = FILE_NAMES.get(subject, "text.txt")
        super().__init__(name, name, original, modified, split=True, annotations=True,
                         wrap=True, **kwargs)
        self.title_text = title

    def get_title(self) -> Content:
        additions, removals = self.counts
        return Content.assemble(
            (self.title_text, "bold"),
            "  (",
            (f"+{additions}", "$text-success bold"),
            ", ",
            (f"-{removals}", "$text-error bold"),
            ")",
        )


class DiffPanel(Vertical):
    """A caption, then a side-by-side diff in a scroll view, or a placeholder saying why
    there is nothing to compare."""

    DEFAULT_CSS = """
    DiffPanel { height: 1fr; }
    DiffPanel > .diff-caption { height: auto; }
    DiffPanel > VerticalScroll { height: 1fr; }
    DiffPanel .diff-placeholder { height: auto; color: $text-muted; padding: 1 2; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.diff: SourceDiff | None = None
        self.placeholder: str | None = "loading…"
        self._shown: tuple[str, str, str, str] | None = None

    def compose(self) -> ComposeResult:
        yield Static(classes="diff-caption", markup=False)
        with VerticalScroll(classes="diff-body"):
            yield Static(self.placeholder or "", classes="diff-placeholder", markup=False)

    @property
    def body(self) -> VerticalScroll:
        return self.query_one(".diff-body", VerticalScroll)

    async def show(self, caption: Text, title: str, original: str | None,
                   modified: str | None, subject: str, placeholder: str | None = None) -> None:
        """Show ``original`` against ``modified``; ``placeholder`` (or, when both are blank
        or equal, a note saying so) instead of a diff."""
        self.query_one(".diff-caption", Static).update(caption)
        if placeholder is None:
            if not (original or "").strip() and not (modified or "").strip():
                placeholder = f"no {subject} on either side (blank or missing)"
            elif original == modified:
                placeholder = f"identical {subject}: no line changed"
        holder = self.query_one(".diff-placeholder", Static)
        if placeholder is not None:
            self.placeholder, self._shown = placeholder, None
            holder.update(placeholder)
            holder.display = True
            if self.diff is not None:
                await self.diff.remove()
                self.diff = None
            return
        shown = (title, original or "", modified or "", subject)
        if shown == self._shown and self.diff is not None:
            return  # the same diff: keep it (and where it is scrolled to)
        self.placeholder, self._shown = None, shown
        holder.display = False
        if self.diff is not None:
            await self.diff.remove()
        self.diff = SourceDiff(title, shown[1], shown[2], subject)
        await self.body.mount(self.diff)
        self.body.scroll_home(animate=False)
