"""Fixtures for the importers' tests: run directories built in the formats' own layouts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import run_fixtures  # noqa: E402


@pytest.fixture
def mkb_run_dir(tmp_path: Path) -> Path:
    """A public MetaKernelBench result store: 2 problems × 2 replicates × 4 arms."""
    return run_fixtures.build_mkb_run(tmp_path / "results" / "kernel-model-1")
