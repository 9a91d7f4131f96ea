"""Fixtures for bundle tests: a small graded experiment in a real store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import bundle_support  # noqa: E402


@pytest.fixture(scope="session")
def graded_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bundle_support.build_store(
        tmp_path_factory.mktemp("bundle") / "store.sqlite", submissions=True
    )


@pytest.fixture
def graded_db(graded_template: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "store.sqlite"
    shutil.copy(graded_template, target)
    return target
