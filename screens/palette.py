"""Command palette: jump to any attempt, problem, comparison or experiment."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from sqlite_utils import Database
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.fuzzy import Matcher

from screens.base import host
from storage import queries

MAX_ATTEMPTS = 20_000


def palette_entries(db: Database, experiment_id: str | None) -> list[tuple[str, str, Any]]:
    """(kind, text, target) for every jump target; attempts of the current experiment."""
    entries: list[tuple[str, str, Any]] = []
    for e in queries.experiments(db):
        entries.append(("experiment", f"experiment {e.id} ({e.state})", e.id))
    attempts = queries.attempts_page(db, experiment_id=experiment_id, limit=MAX_ATTEMPTS)
    for pid in sorted({a.problem_id for a in attempts}):
        entries.append(("problem", f"problem {pid}", pid))
    for c in queries.comparisons(db, experiment_id):
        entries.append(("comparison", f"comparison {c.id} {c.model} {c.problem_id} "
                        f"{c.direction} r{c.replicate} {c.verdict or ''}".rstrip(), c.id))
    for a in attempts:
        entries.append(("attempt", f"attempt {a.id} {a.model} {a.problem_id} {a.arm} "
                        f"r{a.replicate} {a.state}", a.id))
    return entries


def literal_highlight(matcher: Matcher, text: str) -> Content:
    """``text`` as literal content (never markup) with the matched characters styled."""
    content = Content(text)
    _, offsets = matcher.fuzzy_search.match(matcher.query, text)
    for offset in offsets:
        if not text[offset].isspace():
            content = content.stylize(matcher.match_style, offset, offset + 1)
    return content


class JumpProvider(Provider):
    """Search attempts, problems, comparisons and experiments by text."""

    async def startup(self) -> None:
        app = host(self.app)
        self.entries = await app.read(palette_entries, app.experiment_id)

    def _command(self, kind: str, target: Any) -> Callable[[], None]:
        app: Any = self.app
        if kind == "attempt":
            return partial(app.open_attempt, target)
        if kind == "comparison":
            return partial(app.open_comparison, target)
        if kind == "experiment":
            return partial(app.select_experiment, target)
        return partial(app.show_problem, target)

    async def discover(self) -> Hits:
        for kind, text, target in self.entries[:20]:
            yield DiscoveryHit(Content(text), self._command(kind, target), text=text,
                               help=f"jump to this {kind}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for kind, text, target in self.entries:
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, literal_highlight(matcher, text), self._command(kind, target),
                          text=text, help=f"jump to this {kind}")
