"""Fixtures for TUI tests: a seeded database copied per test, and an App factory."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import tui_seed as seed  # noqa: E402


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed.build(tmp_path_factory.mktemp("seed") / "seed.sqlite")


@pytest.fixture
def seeded_db(seeded_template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "tui.sqlite"
    shutil.copy(seeded_template, target)
    return target


@pytest.fixture
def make_app(seeded_db: Path) -> Callable[..., object]:
    from app.tui import MkbApp

    def factory(**kwargs: object) -> MkbApp:
        kwargs.setdefault("clock", lambda: seed.CLOCK)
        kwargs.setdefault("theme", "textual-dark")
        kwargs.setdefault("poll_interval", 0.1)
        kwargs.setdefault("redraw_interval", 0.05)
        return MkbApp(kwargs.pop("db_path", seeded_db), **kwargs)  # type: ignore[arg-type]

    return factory


async def wait_until(pilot: object, condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Let the app run until ``condition()`` holds (fails the test after ``timeout``)."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)  # type: ignore[attr-defined]


def plain(renderable: object, width: int = 200) -> str:
    """A renderable (or a Static's content) as plain text."""
    from rich.console import Console

    content = getattr(renderable, "content", renderable)
    console = Console(width=width, record=True, color_system=None)
    console.print(content)
    return console.export_text()
