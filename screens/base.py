"""What screens need from the App, without importing it: the change batches and a protocol.

The App (``app/tui.py``) implements :class:`TuiHost`; screens reach it as ``self.app`` and
read through ``host.read(queries.fn, ...)`` so no query ever runs on the UI loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from textual.binding import Binding, BindingType
from textual.dom import DOMNode
from textual.screen import Screen
from textual.signal import Signal
from textual.widget import Widget

from engine.events import Area, area_of

if TYPE_CHECKING:
    from screens.live_reply import LiveReply

T = TypeVar("T")



@dataclass(frozen=True)
class Changes:
    """One coalesced batch of engine events: what to re-read, not the data itself."""

    attempt_ids: frozenset[int] = field(default_factory=frozenset)
    kinds: frozenset[str] = field(default_factory=frozenset)
    everything: bool = False

    @property
    def attempts(self) -> bool:
        return self.everything or bool(self.attempt_ids) or self._any(Area.ATTEMPTS)

    @property
    def comparisons(self) -> bool:
        return self.everything or self._any(Area.COMPARISONS)

    @property
    def labels(self) -> bool:
        return self.everything or self._any(Area.LABELS)

    @property
    def experiments(self) -> bool:
        return self.everything or self._any(Area.EXPERIMENTS)

    def _any(self, area: Area) -> bool:
        """Whether an event of the batch changes ``area`` (by its kind, per the catalogue)."""
        return any(area_of(k) is area for k in self.kinds)

    def touches(self, attempt_id: int) -> bool:
        return self.everything or attempt_id in self.attempt_ids


class ChangeCollector:
    """Accumulates events between redraws; :meth:`take` returns one :class:`Changes`."""

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._kinds: set[str] = set()
        self._everything = False
        self.events_seen = 0

    def add(self, kind: str, attempt_id: int | None) -> None:
        self.events_seen += 1
        self._kinds.add(kind)
        if attempt_id is not None:
            self._ids.add(int(attempt_id))

    def add_all(self, items: Iterable[tuple[str, int | None]]) -> None:
        for kind, attempt_id in items:
            self.add(kind, attempt_id)

    def mark_everything(self) -> None:
        self._everything = True

    @property
    def dirty(self) -> bool:
        return self._everything or bool(self._kinds)

    def take(self) -> Changes:
        changes = Changes(frozenset(self._ids), frozenset(self._kinds), self._everything)
        self._ids.clear()
        self._kinds.clear()
        self._everything = False
        return changes


class TuiHost(Protocol):
    """The App's services used by screens."""

    changes: Signal[Changes]
    replies: Signal[frozenset[int]]  # attempts whose streaming reply changed
    read_only: bool
    experiment_id: str | None

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def now(self) -> datetime: ...

    def live_reply(self, attempt_id: int) -> LiveReply | None: ...

    def grading_status(self) -> str | None:
        """The App-owned engine's grading slots ("2/4 busy, 3 waiting"), None without one."""
        ...


def host(node: DOMNode) -> TuiHost:
    """The running App as a :class:`TuiHost` (typed access for screens)."""
    return cast(TuiHost, node.app)


class PagedScreen(Screen[None]):
    """A screen whose main table (or text) PageUp / PageDown page wherever the focus is, so
    no Tab is needed first; :attr:`HELP` is shown under its keys in the help screen."""

    HELP: ClassVar[str] = ""
    MODE: ClassVar[str | None] = None  # the App mode whose base screen this is
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("pageup", "page_main(-1)", "Page up the table", show=False, id="page.up"),
        Binding("pagedown", "page_main(1)", "Page down the table", show=False,
                id="page.down"),
        Binding("e", "experiments", "Experiments: pick one, compare two", show=False,
                id="page.experiments"),
    ]

    def main_scrollable(self) -> Widget | None:
        """The widget PageUp / PageDown page (None: nothing to page)."""
        return None

    def action_experiments(self) -> None:
        """The store's experiments (``screens/experiments.py``): switch, compare two."""
        self.app.push_screen("experiments")  # the App's (screens do not import each other)

    def action_page_main(self, direction: int) -> None:
        target = self.main_scrollable()
        if target is not None:
            (target.action_page_down if direction > 0 else target.action_page_up)()


class LiveScreen(PagedScreen):
    """A screen fed by change batches: it reloads at once while on top, and only once when
    shown again otherwise (a hidden screen runs no queries)."""

    _dirty = False

    def load(self) -> object:
        """Start loading the screen's data (a worker in the subclasses)."""
        raise NotImplementedError

    def reload_or_defer(self) -> None:
        if self.app.screen is self:
            self._dirty = False
            self.load()
        else:
            self._dirty = True

    def on_screen_resume(self) -> None:
        if self._dirty:
            self._dirty = False
            self.load()
