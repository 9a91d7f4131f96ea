"""Shared fixtures: every test gets its own SQLite file and guide cache, and never touches
./mkb-data or the user's cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_db_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MKB_DB", str(tmp_path / "default.sqlite"))
    monkeypatch.setenv("MKB_GUIDES_CACHE", str(tmp_path / "guides-cache"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[object]:
    from storage.store import Store

    s = Store(db_path)
    yield s
    s.close()
